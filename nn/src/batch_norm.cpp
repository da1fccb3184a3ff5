#include "stoke/nn/batch_norm.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

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

// Checks the options first, so a bad one is reported before anything is allocated.
WeightedLayer::InitialValues initial_values(const BatchNorm2dOptions& options) {
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
  Tensor gamma({options.channels});
  for (float& v : gamma.f32()) v = options.zero_gamma ? 0.0f : 1.0f;
  return {.weight = std::move(gamma), .bias = Tensor::zeros({options.channels}), .weight_decays = false};
}

}  // namespace

BatchNorm2d::BatchNorm2d(const BatchNorm2dOptions& options)
    : WeightedLayer(initial_values(options)),
      options_(options),
      running_mean_(Tensor::zeros({options.channels})),
      running_var_({options.channels}) {
  for (float& v : running_var_.f32()) v = 1.0f;
}

std::string BatchNorm2d::describe() const {
  return "BatchNorm2d(" + std::to_string(options_.channels) + ", eps=" + python_float(options_.eps) +
         ", momentum=" + python_float(options_.momentum) + ")";
}

void BatchNorm2d::for_each_buffer(const BufferVisitor& visit, const std::string& prefix) {
  visit(join(prefix, "running_mean"), running_mean_);
  visit(join(prefix, "running_var"), running_var_);
}

void BatchNorm2d::release_activations() {
  WeightedLayer::release_activations();
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
    ctx.backend.batch_norm_forward_inference(x, gamma().value, beta().value, running_mean_, running_var_, options_.eps,
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
  ctx.backend.batch_norm_forward_training(x, gamma().value, beta().value, running_mean_, running_var_,
                                          options_.momentum, options_.eps, y, saved_mean_, saved_invstd_);
  keep_for_backward(x, Tensor(), ctx.mode);  // the kernels take the f32 gamma itself: no compute weight
  return y;
}

Tensor BatchNorm2d::backward_impl(const Tensor& dy, Context& ctx) {
  const Tensor& x = input();
  if (dy.shape() != x.shape()) {
    throw std::invalid_argument(describe() + ": the output gradient is " + dy.describe() + ", expected " +
                                to_string(x.shape()) + " (the shape of the last forward's output)");
  }
  Tensor dx = ctx.backend.empty(x.shape(), x.dtype(), x.layout());
  // Batch norm's kernels take f32 parameters whatever x's dtype: the gradients are the f32 ones.
  accumulate_gradients(ctx.backend, DType::f32, [&](const Tensor& dgamma, const Tensor& dbeta) {
    ctx.backend.batch_norm_backward(x, dy, gamma().value, saved_mean_, saved_invstd_, dx, dgamma, dbeta);
  });
  release_activations();
  return dx;
}

}  // namespace stoke::nn
