#include "stoke/nn/batch_norm.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>

namespace stoke::nn {
namespace {

// A double as Python's repr writes it ("1e-05", "0.1", "1.0"), so describe() reads like PyTorch's.
std::string python_float(double v) {
  char text[64];
  const double magnitude = std::abs(v);
  const bool scientific = magnitude != 0 && (magnitude < 1e-4 || magnitude >= 1e16);
  const auto result =
      std::to_chars(text, text + sizeof text, v, scientific ? std::chars_format::scientific : std::chars_format::fixed);
  std::string s(text, result.ptr);
  if (!scientific && s.find('.') == std::string::npos) s += ".0";
  return s;
}

}  // namespace

BatchNorm2d::BatchNorm2d(const BatchNorm2dOptions& options) : options_(options) {
  if (options.channels < 1) {
    throw std::invalid_argument("BatchNorm2d: channels is " + std::to_string(options.channels) +
                                ", must be at least 1");
  }
  if (!(options.eps > 0)) {
    throw std::invalid_argument("BatchNorm2d(" + std::to_string(options.channels) + "): eps is " +
                                python_float(options.eps) + ", must be positive");
  }
  if (!(options.momentum >= 0 && options.momentum <= 1)) {
    throw std::invalid_argument("BatchNorm2d(" + std::to_string(options.channels) + "): momentum is " +
                                python_float(options.momentum) + ", must be in [0, 1]");
  }
  const Shape channels{options.channels};
  gamma_.value = Tensor(channels);
  for (float& v : gamma_.value.f32()) v = options.zero_gamma ? 0.0f : 1.0f;
  beta_.value = Tensor::zeros(channels);
  running_mean_ = Tensor::zeros(channels);
  running_var_ = Tensor(channels);
  for (float& v : running_var_.f32()) v = 1.0f;
  gamma_.decay = false;
  beta_.decay = false;
}

std::string BatchNorm2d::describe() const {
  return "BatchNorm2d(" + std::to_string(options_.channels) + ", eps=" + python_float(options_.eps) +
         ", momentum=" + python_float(options_.momentum) + ")";
}

void BatchNorm2d::for_each_parameter(const ParameterVisitor& visit, const std::string& prefix) {
  visit(join(prefix, "weight"), gamma_);
  visit(join(prefix, "bias"), beta_);
}

void BatchNorm2d::for_each_buffer(const BufferVisitor& visit, const std::string& prefix) {
  visit(join(prefix, "running_mean"), running_mean_);
  visit(join(prefix, "running_var"), running_var_);
}

void BatchNorm2d::release_activations() {
  input_ = {};
  saved_mean_ = {};
  saved_invstd_ = {};
}

Tensor BatchNorm2d::forward_impl(const Tensor& x, Context& ctx) {
  if (x.rank() != 4 || x.dim(1) != options_.channels) {
    throw std::invalid_argument(describe() + ": the input is " + x.describe() + ", expected [N, " +
                                std::to_string(options_.channels) + ", H, W]");
  }
  if (x.dtype() == DType::u8 || x.dtype() == DType::i32) {
    throw std::invalid_argument(describe() + ": the input " + x.describe() +
                                " is not floating point (f32, bf16 or f16)");
  }
  Tensor y = ctx.backend.empty(x.shape(), x.dtype(), x.layout());
  if (ctx.mode == Mode::eval) {
    ctx.backend.batch_norm_forward_inference(x, gamma_.value, beta_.value, running_mean_, running_var_, options_.eps,
                                             y);
    release_activations();
    return y;
  }
  if (x.dim(0) * x.dim(2) * x.dim(3) < 2) {
    // As PyTorch: one value per channel has no variance to normalise by.
    throw std::invalid_argument(describe() + ": the input is " + x.describe() +
                                "; training needs more than one value per channel (N * H * W > 1)");
  }
  const Shape channels{options_.channels};
  saved_mean_ = ctx.backend.empty(channels);
  saved_invstd_ = ctx.backend.empty(channels);
  ctx.backend.batch_norm_forward_training(x, gamma_.value, beta_.value, running_mean_, running_var_, options_.momentum,
                                          options_.eps, y, saved_mean_, saved_invstd_);
  input_ = x;
  return y;
}

Tensor BatchNorm2d::backward_impl(const Tensor& dy, Context& ctx) {
  if (dy.shape() != input_.shape()) {
    throw std::invalid_argument(describe() + ": the output gradient is " + dy.describe() + ", expected " +
                                to_string(input_.shape()) + " (the shape of the last forward's output)");
  }
  Tensor dx = ctx.backend.empty(input_.shape(), input_.dtype(), input_.layout());
  ctx.backend.batch_norm_backward(input_, dy, gamma_.value, saved_mean_, saved_invstd_, dx,
                                  gradient(gamma_, ctx.backend), gradient(beta_, ctx.backend));
  release_activations();
  return dx;
}

}  // namespace stoke::nn
