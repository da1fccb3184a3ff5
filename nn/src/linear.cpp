#include "stoke/nn/linear.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "stoke/base/random.hpp"

namespace stoke::nn {

namespace {

// Checks the options first, so a bad one is reported before anything is allocated.
WeightedLayer::InitialValues initial_values(const LinearOptions& options) {
  const std::int64_t in = options.in_features;
  const std::int64_t out = options.out_features;
  if (in < 1 || out < 1) {
    throw std::invalid_argument("Linear: in_features (" + std::to_string(in) + ") and out_features (" +
                                std::to_string(out) + ") must both be at least 1");
  }
  // PyTorch's reset_parameters: kaiming_uniform(a = sqrt(5)) for the weight works out to the same
  // bound as the bias's, 1/sqrt(in_features). The weight's values come first, then the bias's.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  base::ItemRng rng(options.seed, 0, 0);
  WeightedLayer::InitialValues values{.weight = Tensor({out, in}), .bias = {}, .weight_decays = true};
  for (float& v : values.weight.f32()) v = static_cast<float>(rng.uniform(-bound, bound));
  if (options.bias) {
    values.bias = Tensor({out});
    for (float& v : values.bias.f32()) v = static_cast<float>(rng.uniform(-bound, bound));
  }
  return values;
}

}  // namespace

Linear::Linear(const LinearOptions& options)
    : WeightedLayer(initial_values(options)), in_(options.in_features), out_(options.out_features) {}

std::string Linear::describe() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (has_bias() ? "True" : "False") + ")";
}

Tensor Linear::forward_impl(const Tensor& x, Context& ctx) {
  if (x.rank() != 2 || x.dim(1) != in_) {
    throw std::invalid_argument(describe() + ": the input is " + x.describe() + ", expected [N, " +
                                std::to_string(in_) + "] (a Flatten before it turns images into rows)");
  }
  if (x.dtype() == DType::u8 || x.dtype() == DType::i32) {
    throw std::invalid_argument(describe() + ": the input " + x.describe() +
                                " is not floating point (f32, bf16 or f16)");
  }
  Tensor y = ctx.backend.empty({x.dim(0), out_}, x.dtype());
  auto [w, b] = compute_parameters(x, ctx.backend);
  ctx.backend.linear_forward(x, w, b, y);
  keep_for_backward(x, std::move(w), ctx.mode);  // backward's input gradient needs the same (cast) weights
  return y;
}

Tensor Linear::backward_impl(const Tensor& dy, Context& ctx) {
  const Tensor& x = input();
  const Shape expected{x.dim(0), out_};
  if (dy.shape() != expected) {
    throw std::invalid_argument(describe() + ": the output gradient is " + dy.describe() + ", expected " +
                                to_string(expected) + " (the shape of the last forward's output)");
  }
  Tensor dx = ctx.backend.empty(x.shape(), x.dtype());
  accumulate_gradients(ctx.backend, x.dtype(), [&](const Tensor& dw, const Tensor& db) {
    ctx.backend.linear_backward(x, compute_weight(), dy, dx, dw, db);
  });
  release_activations();
  return dx;
}

}  // namespace stoke::nn
