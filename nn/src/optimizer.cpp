#include "stoke/nn/optimizer.hpp"

#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

namespace stoke::nn {

namespace {

void check_hyper_parameter(float value, const char* what) {
  if (!std::isfinite(value) || value < 0) {
    throw std::invalid_argument(std::string("Sgd: ") + what + " must be finite and >= 0, not " + std::to_string(value));
  }
}

}  // namespace

Sgd::Sgd(Layer& model, Backend& backend, const SgdOptions& options) : backend_(backend), options_(options) {
  check_hyper_parameter(options.momentum, "momentum");
  check_hyper_parameter(options.weight_decay, "weight_decay");
  if (options.nesterov && options.momentum == 0) {
    throw std::invalid_argument("Sgd: nesterov needs a momentum > 0 (it is 0)");
  }
  std::set<std::string> seen;
  model.for_each_parameter([&](const std::string& name, Parameter& p) {
    if (!seen.insert(name).second) throw std::invalid_argument("Sgd: two parameters are named '" + name + "'");
    if (p.value.dtype() != DType::f32) {
      throw std::invalid_argument("Sgd: parameter '" + name + "' is " + p.value.describe() +
                                  "; the optimizer updates f32 master values");
    }
    if (p.value.device() != backend.device()) {
      throw std::invalid_argument("Sgd: parameter '" + name + "' is on " + p.value.device().str() +
                                  " but the backend on " + backend.device().str() +
                                  " (move the model with Layer::to first)");
    }
    Tensor momentum_buffer =
        options.momentum > 0 ? backend.zeros(p.value.shape(), DType::f32, p.value.layout()) : Tensor();
    slots_.push_back({name, &p, std::move(momentum_buffer)});
  });
}

void Sgd::step(float lr, float grad_scale) {
  if (!std::isfinite(lr) || lr < 0) {
    throw std::invalid_argument("Sgd::step: the learning rate must be finite and >= 0, not " + std::to_string(lr));
  }
  if (!std::isfinite(grad_scale)) {
    throw std::invalid_argument("Sgd::step: grad_scale must be finite, not " + std::to_string(grad_scale));
  }
  for (Slot& slot : slots_) {
    Parameter& p = *slot.parameter;
    if (!p.grad.defined()) continue;
    if (p.value.device() != backend_.device() || p.grad.device() != backend_.device()) {
      throw std::logic_error("Sgd::step: parameter '" + slot.name + "' is on " + p.value.device().str() +
                             " but the optimizer's backend on " + backend_.device().str() +
                             " (the model was moved after the optimizer was built; build it afterwards)");
    }
    // The update pairs elements in memory order: a parameter rearranged by Layer::to_layout after
    // the optimizer was built would be updated with a momentum of other elements.
    if (slot.momentum_buffer.defined() && slot.momentum_buffer.layout() != p.value.layout()) {
      throw std::logic_error("Sgd::step: parameter '" + slot.name + "' is " + p.value.describe() +
                             " but its momentum buffer " + slot.momentum_buffer.describe() +
                             " (the model's layout changed after the optimizer was built; build it afterwards)");
    }
    const SgdStep update{.lr = lr,
                         .momentum = options_.momentum,
                         .weight_decay = p.decay ? options_.weight_decay : 0.0f,
                         .nesterov = options_.nesterov,
                         .grad_scale = grad_scale};
    backend_.sgd_update(p.value, p.grad, slot.momentum_buffer, update);
  }
  zero_grad();
}

void Sgd::zero_grad() {
  for (Slot& slot : slots_) {
    if (slot.parameter->grad.defined()) slot.parameter->grad.zero(backend_.stream());
  }
}

std::int64_t Sgd::element_count() const noexcept {
  std::int64_t count = 0;
  for (const Slot& slot : slots_) count += slot.parameter->value.numel();
  return count;
}

void Sgd::for_each_state(const BufferVisitor& visit) {
  for (Slot& slot : slots_) {
    if (slot.momentum_buffer.defined()) visit(slot.name, slot.momentum_buffer);
  }
}

}  // namespace stoke::nn
