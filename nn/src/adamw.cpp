#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "adamw_update.hpp"
#include "stoke/nn/optimizer.hpp"

namespace stoke::nn {
namespace {

const AdamWOptions& checked(const AdamWOptions& options) {
  for (const auto& [value, what] : {std::pair{options.beta1, "beta1"}, std::pair{options.beta2, "beta2"}}) {
    if (!(value >= 0 && value < 1)) {
      throw std::invalid_argument(std::string("AdamW: ") + what + " must be in [0, 1), not " + std::to_string(value));
    }
  }
  for (const auto& [value, what] : {std::pair{options.eps, "eps"}, std::pair{options.weight_decay, "weight_decay"}}) {
    if (!std::isfinite(value) || value < 0) {
      throw std::invalid_argument(std::string("AdamW: ") + what + " must be finite and >= 0, not " +
                                  std::to_string(value));
    }
  }
  return options;
}

}  // namespace

namespace adamw {

Scalars scalars(const AdamWStep& step) {
  const auto t = static_cast<double>(step.step);
  const auto beta1 = static_cast<double>(step.beta1);
  const auto beta2 = static_cast<double>(step.beta2);
  const auto lr = static_cast<double>(step.lr);
  return {.grad_scale = step.grad_scale,
          .decay_factor = static_cast<float>(1.0 - lr * static_cast<double>(step.weight_decay)),
          .beta1 = step.beta1,
          .one_minus_beta1 = static_cast<float>(1.0 - beta1),
          .beta2 = step.beta2,
          .one_minus_beta2 = static_cast<float>(1.0 - beta2),
          .step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, t))),
          .bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, t))),
          .eps = step.eps};
}

}  // namespace adamw

AdamW::AdamW(Layer& model, Backend& backend, const AdamWOptions& options)
    : Optimizer(model, backend, "AdamW"), options_(checked(options)) {
  for (std::size_t i = 0; i < slots().size(); ++i) {
    states_.push_back({.exp_avg = zeros_like_parameter(i),
                       .exp_avg_sq = zeros_like_parameter(i),
                       .step = Tensor::zeros({}, DType::i32)});
  }
}

OptimizerFactory AdamW::factory(const AdamWOptions& options) {
  return [options](Layer& model, Backend& backend) { return std::make_unique<AdamW>(model, backend, options); };
}

void AdamW::update(std::size_t index, float lr, float grad_scale) {
  State& state = states_[index];
  check_pairs_with(index, state.exp_avg, "exp_avg");
  check_pairs_with(index, state.exp_avg_sq, "exp_avg_sq");
  std::int32_t& step = *state.step.data_as<std::int32_t>();
  if (step < 0 || step == std::numeric_limits<std::int32_t>::max()) {
    throw std::overflow_error("AdamW::step: parameter '" + slots()[index].name + "' has had " + std::to_string(step) +
                              " updates; its step counter cannot count another");
  }
  const std::int32_t next = step + 1;
  Parameter& p = *slots()[index].parameter;
  const AdamWStep update{.lr = lr,
                         .beta1 = options_.beta1,
                         .beta2 = options_.beta2,
                         .eps = options_.eps,
                         .weight_decay = p.decay ? options_.weight_decay : 0.0f,
                         .grad_scale = grad_scale,
                         .step = next};
  backend().adamw_update(p.value, p.grad, state.exp_avg, state.exp_avg_sq, update);
  step = next;
}

void AdamW::for_each_state(const BufferVisitor& visit) {
  for (std::size_t i = 0; i < slots().size(); ++i) visit("exp_avg." + slots()[i].name, states_[i].exp_avg);
  for (std::size_t i = 0; i < slots().size(); ++i) visit("exp_avg_sq." + slots()[i].name, states_[i].exp_avg_sq);
  for (std::size_t i = 0; i < slots().size(); ++i) visit("step." + slots()[i].name, states_[i].step);
}

}  // namespace stoke::nn
