// BatchNorm2d: per-channel normalisation over N, H and W; batch statistics in Mode::train (and the
// running statistics updated), the running statistics in Mode::eval.
//
//   BatchNorm2d bn({.channels = 64});
#pragma once

#include <cstdint>

#include "stoke/nn/weighted_layer.hpp"

namespace stoke::nn {

struct BatchNorm2dOptions {
  std::int64_t channels = 0;
  double eps = 1e-5;
  double momentum = 0.1;  ///< running = (1 - momentum) running + momentum batch (PyTorch's)
  /// Start gamma at zero instead of one (the last BN of a residual branch, "zero-init residual").
  bool zero_gamma = false;
};

/// Its scale gamma is the layer's weight and its shift beta the bias (PyTorch's names), both
/// {channels} and without weight decay.
class BatchNorm2d : public WeightedLayer {
 public:
  /// Throws std::invalid_argument for channels below 1, eps not positive or momentum outside [0, 1].
  explicit BatchNorm2d(const BatchNorm2dOptions& options);

  Parameter& gamma() noexcept { return weight(); }  ///< "weight" in a state dict
  Parameter& beta() noexcept { return *bias(); }    ///< "bias"
  const Tensor& running_mean() const noexcept { return running_mean_; }
  const Tensor& running_var() const noexcept { return running_var_; }

  /// "running_mean" and "running_var".
  void for_each_buffer(const BufferVisitor& visit, const std::string& prefix = {}) override;
  void release_activations() override;
  std::string describe() const override;

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  BatchNorm2dOptions options_;
  Tensor running_mean_;
  Tensor running_var_;
  Tensor saved_mean_;  // the batch's statistics, kept by forward for backward with the input
  Tensor saved_invstd_;
};

}  // namespace stoke::nn
