#include "stoke/nn/dropout.hpp"

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "stoke/base/random.hpp"

namespace stoke::nn {

// ---- Dropout

Dropout::Dropout(float p, std::uint64_t seed) : p_(p), seed_(seed) {
  if (!(p >= 0 && p < 1)) {
    throw std::invalid_argument("Dropout: p = " + std::to_string(p) + " must be in [0, 1)");
  }
}

std::string Dropout::describe() const {
  // The shortest digits that read back as p, as Python prints a float ("0.5", "0.1", "0.0").
  char digits[32];
  const auto [end, error] = std::to_chars(digits, digits + sizeof digits, p_);
  std::string text = error == std::errc{} ? std::string(digits, end) : std::to_string(p_);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return "Dropout(p=" + text + ")";
}

Tensor Dropout::forward_impl(const Tensor& x, Context& ctx) {
  mask_ = {};
  if (ctx.mode == Mode::eval || p_ == 0) return x;
  // Mixed in turn, so that neighbouring steps or seeds give unrelated masks.
  const std::uint64_t seed = base::mix64(base::mix64(base::mix64(ctx.seed) ^ ctx.step) ^ seed_);
  Tensor y = ctx.backend.empty(x.shape(), x.dtype(), x.layout());
  Tensor mask = ctx.backend.empty(x.shape(), DType::u8, x.layout());
  ctx.backend.dropout_forward(x, p_, seed, mask, y);
  mask_ = mask;
  return y;
}

Tensor Dropout::backward_impl(const Tensor& dy, Context& ctx) {
  if (!mask_.defined()) return dy;  // forward was the identity
  if (dy.shape() != mask_.shape()) {
    throw std::invalid_argument(describe() + ": the gradient " + dy.describe() + " is not shaped like the output " +
                                to_string(mask_.shape()));
  }
  Tensor dx = ctx.backend.empty(dy.shape(), dy.dtype(), dy.layout());
  ctx.backend.dropout_backward(dy, mask_, p_, dx);
  mask_ = {};
  return dx;
}

// ---- Flatten

namespace {
// The product of the dimensions after N (counted, not divided out, so that N may be 0).
std::int64_t features(const Shape& shape) {
  std::int64_t count = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) count *= shape[i];
  return count;
}
}  // namespace

Tensor Flatten::forward_impl(const Tensor& x, Context& ctx) {
  if (x.rank() < 2) {
    throw std::invalid_argument(describe() + ": the input " + x.describe() + " has no dimensions after N to flatten");
  }
  // Rows are in NCHW order, as PyTorch flattens; channels-last memory has that order only when
  // each channel holds one value (after global pooling), which is where the models flatten.
  if (x.rank() == 4 && x.layout() == TensorLayout::nhwc && x.dim(2) * x.dim(3) != 1) {
    throw std::invalid_argument(describe() + ": the input " + x.describe() +
                                " is channels-last with H * W > 1; Flatten takes those in NCHW only (pool to 1x1 "
                                "first, or convert with to_layout)");
  }
  input_shape_ = ctx.mode == Mode::train ? x.shape() : Shape{};
  input_layout_ = x.layout();
  return x.reshape({x.dim(0), features(x.shape())});
}

Tensor Flatten::backward_impl(const Tensor& dy, Context& /*ctx*/) {
  const Shape expected{input_shape_.at(0), features(input_shape_)};
  if (dy.shape() != expected) {
    throw std::invalid_argument(describe() + ": the gradient " + dy.describe() + " is not shaped like the output " +
                                to_string(expected));
  }
  Tensor dx = dy.reshape(input_shape_, input_layout_);
  input_shape_.clear();
  return dx;
}

}  // namespace stoke::nn
