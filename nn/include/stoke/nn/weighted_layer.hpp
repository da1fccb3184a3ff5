// WeightedLayer: the base of the layers that hold a weight and an optional bias (Conv2d, Linear,
// BatchNorm2d's scale and shift). It owns the two Parameters, names them "weight" and "bias" as a
// PyTorch state dict does, and keeps what forward leaves for backward: the input, and the weights
// in the input's dtype (the cast copy a bf16 or f16 forward made, so backward uses the same one).
//
//   Tensor Linear::forward_impl(const Tensor& x, Context& ctx) {
//     auto [w, b] = compute_parameters(x, ctx.backend);   // cast to x's dtype when not f32
//     ctx.backend.linear_forward(x, w, b, y);
//     keep_for_backward(x, std::move(w), ctx.mode);
//   }
//   Tensor Linear::backward_impl(const Tensor& dy, Context& ctx) {
//     accumulate_gradients(ctx.backend, input().dtype(), [&](const Tensor& dw, const Tensor& db) {
//       ctx.backend.linear_backward(input(), compute_weight(), dy, dx, dw, db);
//     });
//   }
//
// As every layer, used by one thread at a time.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "stoke/nn/layer.hpp"

namespace stoke::nn {

class WeightedLayer : public Layer {
 public:
  /// A subclass's initial values. An undefined bias means none; the bias never decays
  /// (Parameter::decay), the weight does when weight_decays.
  struct InitialValues {
    Tensor weight;
    Tensor bias;
    bool weight_decays = true;
  };

  /// The weight (f32 master values; a state dict's "weight").
  Parameter& weight() noexcept { return weight_; }
  /// The bias ("bias"); null for a layer without one.
  Parameter* bias() noexcept { return bias_ ? &*bias_ : nullptr; }
  bool has_bias() const noexcept { return bias_.has_value(); }

  /// "weight", then "bias" when there is one.
  void for_each_parameter(const ParameterVisitor& visit, const std::string& prefix = {}) override;
  /// Drops the kept input and weights; a subclass that keeps more extends it.
  void release_activations() override;

 protected:
  explicit WeightedLayer(InitialValues initial);

  /// The weight and the bias (undefined without one) as the kernels take them for input `x`:
  /// Layer::compute_value of each, so f32 values themselves or copies cast to x's dtype.
  std::pair<Tensor, Tensor> compute_parameters(const Tensor& x, Backend& backend) const;
  /// In Mode::train keeps `x` and `compute_weight` (the weight the forward kernel was given) for
  /// backward; in Mode::eval releases whatever was kept (release_activations()).
  void keep_for_backward(const Tensor& x, Tensor compute_weight, Mode mode);
  /// The input and the compute weight kept by the last training forward.
  const Tensor& input() const noexcept { return input_; }
  const Tensor& compute_weight() const noexcept { return compute_weight_; }

  /// Calls kernel(dw, db) with the tensors a kernel computing in `dtype` accumulates the weight's
  /// and the bias's gradients into (db undefined without a bias; Layer::GradientTarget), then adds
  /// them into the f32 gradients.
  template <class Kernel>
  void accumulate_gradients(Backend& backend, DType dtype, const Kernel& kernel) {
    GradientTarget dw(weight_, dtype, backend);
    GradientTarget db = bias_ ? GradientTarget(*bias_, dtype, backend) : GradientTarget();
    kernel(dw.tensor(), db.tensor());
    dw.commit();
    db.commit();
  }

 private:
  Parameter weight_;
  std::optional<Parameter> bias_;
  Tensor input_;           // kept by a training forward for backward
  Tensor compute_weight_;  // the weights in the input's dtype, kept with it
};

}  // namespace stoke::nn
