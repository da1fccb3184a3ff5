// CudaBackend's max and global average pooling: argument checks, then pooling_kernels.cu.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"

namespace stoke::nn::cuda {

void CudaBackend::max_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y) {
  constexpr const char* kernel = "max_pool2d_forward";
  require_float(x, device_, kernel, "x");
  require_float(y, device_, kernel, "y", &x);
  const ImageDims in = image_dims(x, kernel, "x");
  require_shape(y, {x.dim(0), x.dim(1), g.output_size(x.dim(2)), g.output_size(x.dim(3))}, kernel, "y");
  require_layout(y, x, kernel, "y");
  const DeviceGuard guard(device_);
  cuda::max_pool2d_forward(x.dtype(), {g.kernel, g.stride, g.padding}, x.data(), in, y.data(),
                           image_dims(y, kernel, "y"), native(stream_));
}

void CudaBackend::max_pool2d_backward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                                      const Tensor& dx) {
  constexpr const char* kernel = "max_pool2d_backward";
  require_float(x, device_, kernel, "x");
  require_float(dy, device_, kernel, "dy", &x);
  require_float(dx, device_, kernel, "dx", &x);
  const ImageDims in = image_dims(x, kernel, "x");
  const Shape pooled{x.dim(0), x.dim(1), g.output_size(x.dim(2)), g.output_size(x.dim(3))};
  if (y.defined()) require_shape(y, pooled, kernel, "y");  // unused: the winners are found from x
  require_shape(dy, pooled, kernel, "dy");
  require_shape(dx, x.shape(), kernel, "dx");
  require_layout(dy, x, kernel, "dy");
  require_layout(dx, x, kernel, "dx");
  const DeviceGuard guard(device_);
  const Tensor winners = empty(pooled, DType::i32, x.layout());
  cuda::max_pool2d_backward(x.dtype(), {g.kernel, g.stride, g.padding}, x.data(), in, dy.data(),
                            image_dims(dy, kernel, "dy"), winners.data_as<std::int32_t>(), dx.data(),
                            native(stream_));
}

void CudaBackend::global_avg_pool_forward(const Tensor& x, const Tensor& y) {
  constexpr const char* kernel = "global_avg_pool_forward";
  require_float(x, device_, kernel, "x");
  require_float(y, device_, kernel, "y", &x);
  const ImageDims in = image_dims(x, kernel, "x");
  require_shape(y, {x.dim(0), x.dim(1)}, kernel, "y");
  const DeviceGuard guard(device_);
  cuda::global_avg_pool_forward(x.dtype(), x.data(), in, y.data(), native(stream_));
}

void CudaBackend::global_avg_pool_backward(const Tensor& dy, const Tensor& dx) {
  constexpr const char* kernel = "global_avg_pool_backward";
  require_float(dx, device_, kernel, "dx");
  require_float(dy, device_, kernel, "dy", &dx);
  const ImageDims in = image_dims(dx, kernel, "dx");
  require_shape(dy, {dx.dim(0), dx.dim(1)}, kernel, "dy");
  const DeviceGuard guard(device_);
  cuda::global_avg_pool_backward(dx.dtype(), dy.data(), dx.data(), in, native(stream_));
}

}  // namespace stoke::nn::cuda
