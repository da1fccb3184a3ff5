#include "stoke/nn/pooling.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

namespace stoke::nn {

// ---- MaxPool2d

MaxPool2d::MaxPool2d(const Pool2dGeometry& geometry) : geometry_(geometry) {
  if (geometry.kernel < 1 || geometry.stride < 1) {
    throw std::invalid_argument("MaxPool2d: kernel_size " + std::to_string(geometry.kernel) + " and stride " +
                                std::to_string(geometry.stride) + " must both be at least 1");
  }
  if (geometry.padding < 0 || geometry.padding > geometry.kernel / 2) {
    throw std::invalid_argument("MaxPool2d: padding " + std::to_string(geometry.padding) + " must be in [0, " +
                                std::to_string(geometry.kernel / 2) + "], at most half the kernel_size " +
                                std::to_string(geometry.kernel) + " (PyTorch's limit)");
  }
}

void MaxPool2d::release_activations() {
  input_ = {};
  output_ = {};
}

std::string MaxPool2d::describe() const {
  return "MaxPool2d(kernel_size=" + std::to_string(geometry_.kernel) + ", stride=" + std::to_string(geometry_.stride) +
         ", padding=" + std::to_string(geometry_.padding) + ")";
}

Tensor MaxPool2d::forward_impl(const Tensor& x, Context& ctx) {
  if (x.rank() != 4) {
    throw std::invalid_argument(describe() + ": the input " + x.describe() + " is not an image batch {N, C, H, W}");
  }
  const std::int64_t out_h = geometry_.output_size(x.dim(2));
  const std::int64_t out_w = geometry_.output_size(x.dim(3));
  if (x.dim(2) + 2 * geometry_.padding < geometry_.kernel || x.dim(3) + 2 * geometry_.padding < geometry_.kernel) {
    throw std::invalid_argument(describe() + ": the input " + x.describe() +
                                " is smaller than one window, even padded");
  }
  Tensor y = ctx.backend.empty({x.dim(0), x.dim(1), out_h, out_w}, x.dtype(), x.layout());
  ctx.backend.max_pool2d_forward(geometry_, x, y);
  if (ctx.mode == Mode::train) {
    input_ = x;
    output_ = y;
  } else {
    release_activations();
  }
  return y;
}

Tensor MaxPool2d::backward_impl(const Tensor& dy, Context& ctx) {
  if (dy.shape() != output_.shape()) {
    throw std::invalid_argument(describe() + ": the gradient " + dy.describe() + " is not shaped like the output " +
                                to_string(output_.shape()));
  }
  Tensor dx = ctx.backend.empty(input_.shape(), dy.dtype(), input_.layout());
  ctx.backend.max_pool2d_backward(geometry_, input_, output_, dy, dx);
  release_activations();
  return dx;
}

// ---- GlobalAvgPool

Tensor GlobalAvgPool::forward_impl(const Tensor& x, Context& ctx) {
  if (x.rank() != 4) {
    throw std::invalid_argument(describe() + ": the input " + x.describe() + " is not an image batch {N, C, H, W}");
  }
  Tensor y = ctx.backend.empty({x.dim(0), x.dim(1)}, x.dtype(), TensorLayout::nchw);
  ctx.backend.global_avg_pool_forward(x, y);
  if (ctx.mode == Mode::train) {
    input_shape_ = x.shape();
    input_layout_ = x.layout();
  } else {
    release_activations();
  }
  return y;
}

Tensor GlobalAvgPool::backward_impl(const Tensor& dy, Context& ctx) {
  const Shape expected{input_shape_.at(0), input_shape_.at(1)};
  if (dy.shape() != expected) {
    throw std::invalid_argument(describe() + ": the gradient " + dy.describe() + " is not shaped like the output " +
                                to_string(expected));
  }
  Tensor dx = ctx.backend.empty(input_shape_, dy.dtype(), input_layout_);
  ctx.backend.global_avg_pool_backward(dy, dx);
  release_activations();
  return dx;
}

}  // namespace stoke::nn
