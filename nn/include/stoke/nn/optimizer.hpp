// Optimizers: the Optimizer interface, over every parameter of a model, and its two
// implementations, Sgd (torch.optim.SGD: momentum, Nesterov, weight decay) and AdamW
// (torch.optim.AdamW: decoupled weight decay, bias-corrected moments).
//
//   Sgd sgd(model, backend, {.momentum = 0.9f, .weight_decay = 5e-4f});
//   AdamW adamw(model, backend, {.weight_decay = 0.05f});
//   Optimizer& optimizer = ...;
//   for (...) {
//     model.backward(loss.dlogits, ctx);              // gradients accumulate (+=)
//     optimizer.step(schedule.at(step));              // updates, then zeroes the gradients
//   }
//
// Weight decay applies only to the parameters whose Parameter::decay is set (weights, not biases
// or batch-norm scales and shifts). An optimizer keeps its state (momentum buffers, moments) on
// the backend's device; checkpoint.hpp saves and restores it through for_each_state().
//
// An optimizer holds pointers to the model's Parameter objects: the model must outlive it and
// keep its layers (moving the model with Layer::to() keeps the Parameter objects, but the state
// stays where it was: build the optimizer after moving the model). Used by one thread at a time,
// with the backend it was given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nn/backend.hpp"
#include "stoke/nn/layer.hpp"

namespace stoke::nn {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// One update of every parameter that has a gradient, with learning rate `lr`, then zeroes the
  /// gradients. grad_scale multiplies the gradients first, e.g. 1 / accumulation steps, or 1 /
  /// loss scale. Parameters without a gradient (none allocated yet) are left alone, state
  /// included, as torch.optim skips those whose grad is None. Throws std::invalid_argument for a
  /// negative or not finite lr or a not finite grad_scale; std::logic_error when a parameter has
  /// been moved off the backend's device, or rearranged (Layer::to_layout), since the optimizer
  /// was built.
  void step(float lr, float grad_scale = 1);
  /// step() with the fp16 loss scaler's state on the device (a LossScaleState, backend.hpp), for
  /// a step that waits for nothing: the gradients are divided by its scale too, and when its
  /// found_inf is set no parameter and no state changes (the gradients are zeroed all the same).
  /// Throws std::logic_error unless skips_on_device().
  void step(float lr, float grad_scale, const Tensor& loss_scale);
  /// True when step() takes a loss scale state: nothing the update keeps on the host changes with
  /// a step (Sgd); AdamW counts its steps on the host for the bias corrections, so a skipped step
  /// must be known there, and the Trainer then checks for an overflow on the host.
  virtual bool skips_on_device() const noexcept { return false; }
  /// Zeroes every allocated gradient (enqueued on the backend's stream).
  void zero_grad();

  /// The parameter tensors it updates.
  std::size_t parameter_count() const noexcept { return slots_.size(); }
  /// The scalars in them.
  std::int64_t element_count() const noexcept;

  /// "sgd" or "adamw": the kind of state it keeps. A checkpoint names the optimizer its state
  /// came from, so that state is never loaded into another kind.
  virtual std::string_view name() const noexcept = 0;
  /// Calls `visit` with each tensor of the optimizer's state, named as a checkpoint stores it
  /// after "optimizer.": "<kind>.<parameter>", e.g. "momentum_buffer.conv1.weight", in the
  /// model's order. The tensors may be on the backend's device or (small counters) on the host.
  virtual void for_each_state(const BufferVisitor& visit) = 0;

 protected:
  /// Collects model's parameters (names from for_each_parameter). Throws std::invalid_argument,
  /// beginning with `who` ("Sgd"), naming the parameter for one that is not f32 or not on the
  /// backend's device, or a name seen twice.
  Optimizer(Layer& model, Backend& backend, std::string who);

  struct Slot {
    std::string name;
    Parameter* parameter = nullptr;
  };
  const std::vector<Slot>& slots() const noexcept { return slots_; }
  Backend& backend() const noexcept { return backend_; }
  /// "Sgd", "AdamW": the class, for messages.
  const std::string& who() const noexcept { return who_; }

  /// A tensor of zeros shaped and laid out as slot `index`'s parameter, on the backend's device:
  /// state that pairs with the parameter element by element.
  Tensor zeros_like_parameter(std::size_t index) const;
  /// Throws std::logic_error when `state` (named `what`) no longer pairs with slot `index`'s
  /// parameter element by element: the update pairs elements in memory order, and a parameter
  /// rearranged by Layer::to_layout after the optimizer was built would be updated with the state
  /// of other elements.
  void check_pairs_with(std::size_t index, const Tensor& state, const char* what) const;

  /// Updates slot `index`'s parameter, whose gradient is defined and on the backend's device
  /// (step() checked both and the arguments).
  virtual void update(std::size_t index, float lr, float grad_scale) = 0;
  /// update() with a loss scale state (step()'s third argument); only where skips_on_device():
  /// the base throws std::logic_error.
  virtual void update_scaled(std::size_t index, float lr, float grad_scale, const Tensor& loss_scale);

 private:
  // step()'s checks of its arguments.
  void check_step(float lr, float grad_scale) const;
  // Calls visit(index) for each parameter with a gradient (checked to be on the backend's
  // device), then zeroes the gradients.
  void for_each_gradient(const std::function<void(std::size_t)>& visit);

  Backend& backend_;
  std::string who_;
  std::vector<Slot> slots_;
};

/// How Trainer builds its optimizer over a model (TrainerOptions::optimizer).
using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(Layer& model, Backend& backend)>;

// ---- SGD

struct SgdOptions {
  float momentum = 0.9f;       ///< >= 0; 0 is plain SGD, with no momentum buffers
  float weight_decay = 5e-4f;  ///< >= 0, L2 on the parameters whose Parameter::decay is set
  bool nesterov = false;       ///< Nesterov momentum (needs momentum > 0)
};

/// torch.optim.SGD with dampening 0: Backend::sgd_update with SgdStep{lr, momentum, weight decay
/// only where Parameter::decay, nesterov, grad_scale} for each parameter. Its state is one
/// momentum buffer per parameter ("momentum_buffer.<name>"), none when momentum is 0.
class Sgd final : public Optimizer {
 public:
  /// Allocates zeroed momentum buffers on the parameters' device. Throws std::invalid_argument
  /// for a negative (or not finite) momentum or weight decay, nesterov with momentum 0, and what
  /// Optimizer's constructor throws.
  Sgd(Layer& model, Backend& backend, const SgdOptions& options = {});
  /// A factory for TrainerOptions::optimizer.
  static OptimizerFactory factory(const SgdOptions& options);

  std::string_view name() const noexcept override { return "sgd"; }
  void for_each_state(const BufferVisitor& visit) override;
  const SgdOptions& options() const noexcept { return options_; }
  bool skips_on_device() const noexcept override { return true; }

 protected:
  void update(std::size_t index, float lr, float grad_scale) override;
  void update_scaled(std::size_t index, float lr, float grad_scale, const Tensor& loss_scale) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_buffers_;  // per slot; undefined when momentum is 0
};

// ---- AdamW

/// torch.optim.AdamW's hyper-parameters and defaults (amsgrad is not offered).
struct AdamWOptions {
  float beta1 = 0.9f;          ///< in [0, 1): the first moment's decay
  float beta2 = 0.999f;        ///< in [0, 1): the second moment's decay
  float eps = 1e-8f;           ///< >= 0, added to the second moment's root
  float weight_decay = 1e-2f;  ///< >= 0, decoupled: param *= 1 - lr * weight_decay where Parameter::decay
};

/// torch.optim.AdamW: Backend::adamw_update (AdamWStep's formula, backend.hpp) for each
/// parameter, with decoupled weight decay only where Parameter::decay. Its state, per parameter:
/// "exp_avg.<name>" and "exp_avg_sq.<name>" (f32, the parameter's shape, on the backend's device)
/// and "step.<name>" (an i32 scalar on the host: the updates this parameter has had, as torch
/// counts them per parameter, so one that gets its first gradient late starts its own bias
/// correction then).
class AdamW final : public Optimizer {
 public:
  /// Allocates zeroed moments. Throws std::invalid_argument naming the option for a beta outside
  /// [0, 1), a negative or not finite eps or weight decay, and what Optimizer's constructor throws.
  AdamW(Layer& model, Backend& backend, const AdamWOptions& options = {});
  /// A factory for TrainerOptions::optimizer.
  static OptimizerFactory factory(const AdamWOptions& options);

  std::string_view name() const noexcept override { return "adamw"; }
  void for_each_state(const BufferVisitor& visit) override;
  const AdamWOptions& options() const noexcept { return options_; }

 protected:
  /// Throws std::overflow_error when the parameter has had 2^31 - 1 updates (its step counter).
  void update(std::size_t index, float lr, float grad_scale) override;

 private:
  struct State {
    Tensor exp_avg;
    Tensor exp_avg_sq;
    Tensor step;  // i32 {}, on the host
  };
  AdamWOptions options_;
  std::vector<State> states_;  // per slot
};

}  // namespace stoke::nn
