#include "stoke/nn/weighted_layer.hpp"

#include <string>
#include <utility>

namespace stoke::nn {

WeightedLayer::WeightedLayer(InitialValues initial) {
  weight_.value = std::move(initial.weight);
  weight_.decay = initial.weight_decays;
  if (initial.bias.defined()) bias_ = Parameter{.value = std::move(initial.bias), .grad = {}, .decay = false};
}

void WeightedLayer::for_each_parameter(const ParameterVisitor& visit, const std::string& prefix) {
  visit(join(prefix, "weight"), weight_);
  if (bias_) visit(join(prefix, "bias"), *bias_);
}

void WeightedLayer::release_activations() {
  input_ = {};
  compute_weight_ = {};
}

std::pair<Tensor, Tensor> WeightedLayer::compute_parameters(const Tensor& x, Backend& backend) const {
  Tensor w = compute_value(weight_, x, backend);
  Tensor b = bias_ ? compute_value(*bias_, x, backend) : Tensor();
  return {std::move(w), std::move(b)};
}

void WeightedLayer::keep_for_backward(const Tensor& x, Tensor compute_weight, Mode mode) {
  if (mode == Mode::train) {
    input_ = x;
    compute_weight_ = std::move(compute_weight);
  } else {
    release_activations();
  }
}

}  // namespace stoke::nn
