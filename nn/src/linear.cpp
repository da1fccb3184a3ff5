#include "stoke/nn/linear.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "stoke/graph/random.hpp"

namespace stoke::nn {

Linear::Linear(const LinearOptions& options) : in_(options.in_features), out_(options.out_features) {
  if (in_ < 1 || out_ < 1) {
    throw std::invalid_argument("Linear: in_features (" + std::to_string(in_) + ") and out_features (" +
                                std::to_string(out_) + ") must both be at least 1");
  }
  // PyTorch's reset_parameters: kaiming_uniform(a = sqrt(5)) for the weight works out to the same
  // bound as the bias's, 1/sqrt(in_features). The weight's values come first, then the bias's.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_));
  graph::ItemRng rng(options.seed, 0, 0);
  weight_.value = Tensor({out_, in_});
  for (float& v : weight_.value.f32()) v = static_cast<float>(rng.uniform(-bound, bound));
  if (options.bias) {
    bias_.emplace();
    bias_->value = Tensor({out_});
    bias_->decay = false;
    for (float& v : bias_->value.f32()) v = static_cast<float>(rng.uniform(-bound, bound));
  }
}

std::string Linear::describe() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (bias_ ? "True" : "False") + ")";
}

void Linear::for_each_parameter(const ParameterVisitor& visit, const std::string& prefix) {
  visit(join(prefix, "weight"), weight_);
  if (bias_) visit(join(prefix, "bias"), *bias_);
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
  Tensor w = compute_value(weight_, x, ctx.backend);
  ctx.backend.linear_forward(x, w, bias_ ? compute_value(*bias_, x, ctx.backend) : Tensor(), y);
  if (ctx.mode == Mode::train) {
    input_ = x;
    compute_weight_ = std::move(w);  // backward's input gradient needs the same (cast) weights
  } else {
    release_activations();
  }
  return y;
}

Tensor Linear::backward_impl(const Tensor& dy, Context& ctx) {
  const Shape expected{input_.dim(0), out_};
  if (dy.shape() != expected) {
    throw std::invalid_argument(describe() + ": the output gradient is " + dy.describe() + ", expected " +
                                to_string(expected) + " (the shape of the last forward's output)");
  }
  Tensor dx = ctx.backend.empty(input_.shape(), input_.dtype());
  GradientTarget dw(weight_, input_.dtype(), ctx.backend);
  GradientTarget db = bias_ ? GradientTarget(*bias_, input_.dtype(), ctx.backend) : GradientTarget();
  ctx.backend.linear_backward(input_, compute_weight_, dy, dx, dw.tensor(), db.tensor());
  dw.commit();
  db.commit();
  release_activations();
  return dx;
}

}  // namespace stoke::nn
