// Dropout: in Mode::train, zeroes each element with probability p and scales the rest by
// 1 / (1 - p); the identity in Mode::eval. The mask is a function of the context's seed and step
// and the layer's own seed, so a seeded run is reproducible.
#pragma once

#include <cstdint>

#include "stoke/nn/layer.hpp"

namespace stoke::nn {

class Dropout : public Layer {
 public:
  /// Throws std::invalid_argument unless 0 <= p < 1.
  explicit Dropout(float p = 0.5f, std::uint64_t seed = 0);
  float p() const noexcept { return p_; }
  void release_activations() override { mask_ = {}; }
  std::string describe() const override;

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  float p_;
  std::uint64_t seed_;
  Tensor mask_;  // u8; undefined when forward was the identity
};

/// Flatten: {N, d1, d2, ...} -> {N, d1 * d2 * ...}, sharing the elements, in PyTorch's (NCHW)
/// order: an NHWC input is taken only with H = W = 1, where the two orders are the same.
class Flatten : public Layer {
 public:
  Flatten() = default;
  void release_activations() override { input_shape_.clear(); }
  std::string describe() const override { return "Flatten()"; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  Shape input_shape_;
  TensorLayout input_layout_ = TensorLayout::nchw;  // the gradient goes back in it
};

}  // namespace stoke::nn
