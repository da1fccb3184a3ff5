#include "stoke/nn/optimizer.hpp"

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

namespace stoke::nn {

Optimizer::Optimizer(Layer& model, Backend& backend, std::string who) : backend_(backend), who_(std::move(who)) {
  std::set<std::string> seen;
  model.for_each_parameter([&](const std::string& name, Parameter& p) {
    if (!seen.insert(name).second) throw std::invalid_argument(who_ + ": two parameters are named '" + name + "'");
    if (p.value.dtype() != DType::f32) {
      throw std::invalid_argument(who_ + ": parameter '" + name + "' is " + p.value.describe() +
                                  "; the optimizer updates f32 master values");
    }
    if (p.value.device() != backend.device()) {
      throw std::invalid_argument(who_ + ": parameter '" + name + "' is on " + p.value.device().str() +
                                  " but the backend on " + backend.device().str() +
                                  " (move the model with Layer::to first)");
    }
    slots_.push_back({name, &p});
  });
}

void Optimizer::step(float lr, float grad_scale) {
  check_step(lr, grad_scale);
  for_each_gradient([&](std::size_t index) { update(index, lr, grad_scale); });
}

void Optimizer::step(float lr, float grad_scale, const Tensor& loss_scale) {
  if (!skips_on_device()) {
    throw std::logic_error(who_ +
                           "::step: this optimizer cannot skip an overflowed step on the device (its update "
                           "keeps state on the host); check the gradients first and call step(lr, grad_scale)");
  }
  check_step(lr, grad_scale);
  for_each_gradient([&](std::size_t index) { update_scaled(index, lr, grad_scale, loss_scale); });
}

void Optimizer::update_scaled(std::size_t /*index*/, float /*lr*/, float /*grad_scale*/, const Tensor& /*loss_scale*/) {
  throw std::logic_error(who_ + ": no update with a loss scale state");
}

void Optimizer::check_step(float lr, float grad_scale) const {
  if (!std::isfinite(lr) || lr < 0) {
    throw std::invalid_argument(who_ + "::step: the learning rate must be finite and >= 0, not " + std::to_string(lr));
  }
  if (!std::isfinite(grad_scale)) {
    throw std::invalid_argument(who_ + "::step: grad_scale must be finite, not " + std::to_string(grad_scale));
  }
}

void Optimizer::for_each_gradient(const std::function<void(std::size_t)>& visit) {
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    const Parameter& p = *slots_[i].parameter;
    if (!p.grad.defined()) continue;
    if (p.value.device() != backend_.device() || p.grad.device() != backend_.device()) {
      throw std::logic_error(who_ + "::step: parameter '" + slots_[i].name + "' is on " + p.value.device().str() +
                             " but the optimizer's backend on " + backend_.device().str() +
                             " (the model was moved after the optimizer was built; build it afterwards)");
    }
    visit(i);
  }
  zero_grad();
}

void Optimizer::zero_grad() {
  for (const Slot& slot : slots_) {
    if (slot.parameter->grad.defined()) slot.parameter->grad.zero(backend_.stream());
  }
}

std::int64_t Optimizer::element_count() const noexcept {
  std::int64_t count = 0;
  for (const Slot& slot : slots_) count += slot.parameter->value.numel();
  return count;
}

Tensor Optimizer::zeros_like_parameter(std::size_t index) const {
  const Tensor& value = slots_[index].parameter->value;
  return backend_.zeros(value.shape(), DType::f32, value.layout());
}

void Optimizer::check_pairs_with(std::size_t index, const Tensor& state, const char* what) const {
  const Slot& slot = slots_[index];
  if (state.layout() != slot.parameter->value.layout()) {
    throw std::logic_error(who_ + "::step: parameter '" + slot.name + "' is " + slot.parameter->value.describe() +
                           " but its " + what + " " + state.describe() +
                           " (the model's layout changed after the optimizer was built; build it afterwards)");
  }
}

}  // namespace stoke::nn
