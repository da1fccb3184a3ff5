#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "stoke/nn/optimizer.hpp"

namespace stoke::nn {
namespace {

const SgdOptions& checked(const SgdOptions& options) {
  for (const auto& [value, what] :
       {std::pair{options.momentum, "momentum"}, std::pair{options.weight_decay, "weight_decay"}}) {
    if (!std::isfinite(value) || value < 0) {
      throw std::invalid_argument(std::string("Sgd: ") + what + " must be finite and >= 0, not " +
                                  std::to_string(value));
    }
  }
  if (options.nesterov && options.momentum == 0) {
    throw std::invalid_argument("Sgd: nesterov needs a momentum > 0 (it is 0)");
  }
  return options;
}

}  // namespace

Sgd::Sgd(Layer& model, Backend& backend, const SgdOptions& options)
    : Optimizer(model, backend, "Sgd"), options_(checked(options)) {
  for (std::size_t i = 0; i < slots().size(); ++i) {
    momentum_buffers_.push_back(options_.momentum > 0 ? zeros_like_parameter(i) : Tensor());
  }
}

OptimizerFactory Sgd::factory(const SgdOptions& options) {
  return [options](Layer& model, Backend& backend) { return std::make_unique<Sgd>(model, backend, options); };
}

void Sgd::update(std::size_t index, float lr, float grad_scale) { update_scaled(index, lr, grad_scale, Tensor()); }

void Sgd::update_scaled(std::size_t index, float lr, float grad_scale, const Tensor& loss_scale) {
  const Tensor& buffer = momentum_buffers_[index];
  if (buffer.defined()) check_pairs_with(index, buffer, "momentum buffer");
  Parameter& p = *slots()[index].parameter;
  const SgdStep step{.lr = lr,
                     .momentum = options_.momentum,
                     .weight_decay = p.decay ? options_.weight_decay : 0.0f,
                     .nesterov = options_.nesterov,
                     .grad_scale = grad_scale,
                     .loss_scale = loss_scale};
  backend().sgd_update(p.value, p.grad, buffer, step);
}

void Sgd::for_each_state(const BufferVisitor& visit) {
  for (std::size_t i = 0; i < slots().size(); ++i) {
    if (momentum_buffers_[i].defined()) visit("momentum_buffer." + slots()[i].name, momentum_buffers_[i]);
  }
}

}  // namespace stoke::nn
