// Sgd: stochastic gradient descent with momentum and weight decay, as torch.optim.SGD
// (dampening 0), over every parameter of a model.
//
//   Sgd sgd(model, backend, {.momentum = 0.9f, .weight_decay = 5e-4f});
//   for (...) {
//     model.backward(loss.dlogits, ctx);              // gradients accumulate (+=)
//     sgd.step(schedule.at(step));                    // updates, then zeroes the gradients
//   }
//
// The update of each parameter is Backend::sgd_update (its formula is in backend.hpp's SgdStep);
// weight decay applies only to the parameters whose Parameter::decay is set (weights, not biases
// or batch-norm scales and shifts). The optimizer keeps one momentum buffer per parameter (none
// when momentum is 0) on the backend's device; checkpoint.hpp saves and restores them.
//
// The optimizer holds pointers to the model's Parameter objects: the model must outlive it and
// keep its layers (moving the model with Layer::to() keeps the Parameter objects, but the
// momentum buffers stay where they were: build the optimizer after moving the model). Used by one
// thread at a time, with the backend it was given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "stoke/nn/backend.hpp"
#include "stoke/nn/layer.hpp"

namespace stoke::nn {

struct SgdOptions {
  float momentum = 0.9f;       ///< >= 0; 0 is plain SGD, with no momentum buffers
  float weight_decay = 5e-4f;  ///< >= 0, L2 on the parameters whose Parameter::decay is set
  bool nesterov = false;       ///< Nesterov momentum (needs momentum > 0)
};

class Sgd {
 public:
  /// Collects model's parameters (names from for_each_parameter) and allocates zeroed momentum
  /// buffers on the parameters' device (via backend.zeros). Throws std::invalid_argument for a
  /// negative (or not finite) momentum or weight decay, for nesterov with momentum 0, and naming
  /// the parameter for one that is not f32 or not on the backend's device, or a name seen twice.
  Sgd(Layer& model, Backend& backend, const SgdOptions& options = {});

  /// One update of every parameter that has a gradient: backend.sgd_update with SgdStep{lr,
  /// momentum, weight decay only where Parameter::decay, nesterov, grad_scale}, then zeroes the
  /// gradients. grad_scale multiplies the gradients first, e.g. 1 / accumulation steps, or 1 / loss
  /// scale. Parameters without a gradient (none allocated yet) are left alone, momentum included,
  /// as torch.optim.SGD skips those whose grad is None. Throws std::invalid_argument for a negative
  /// or not finite lr or a not finite grad_scale; std::logic_error when a parameter has been moved
  /// off the backend's device since the optimizer was built.
  void step(float lr, float grad_scale = 1);
  /// Zeroes every allocated gradient (enqueued on the backend's stream).
  void zero_grad();

  /// The parameter tensors it updates.
  std::size_t parameter_count() const noexcept { return slots_.size(); }
  /// The scalars in them.
  std::int64_t element_count() const noexcept;

  /// Calls `visit` with each momentum buffer, named as its parameter ("conv1.weight"; the
  /// checkpoint prefixes them), in the model's order. Visits nothing when momentum is 0.
  void for_each_state(const BufferVisitor& visit);

  const SgdOptions& options() const noexcept { return options_; }

 private:
  struct Slot {
    std::string name;
    Parameter* parameter = nullptr;
    Tensor momentum_buffer;  // undefined when momentum is 0
  };

  Backend& backend_;
  SgdOptions options_;
  std::vector<Slot> slots_;
};

}  // namespace stoke::nn
