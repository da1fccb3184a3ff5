// BatchNorm2d: per-channel normalisation over N, H and W; batch statistics in Mode::train (and the
// running statistics updated), the running statistics in Mode::eval.
//
//   BatchNorm2d bn({.channels = 64});
//
// Sync batch norm (PyTorch's SyncBatchNorm): with Context::batch_norm_sync set in Mode::train, the
// statistics are those of the whole batch over all replicas. Forward makes one ReplicaSum::sum of
// {count, sum(x) per channel, sum(x^2) per channel} (double) and normalises with the global mean
// and biased variance; the running statistics take the global mean and the unbiased variance over
// the global count. Backward makes one sum of {sum(dy), sum(dy * xhat)} per channel for the input
// gradient, while gamma's and beta's gradients stay this replica's own sums (the gradient
// all-reduce sums them later, as in PyTorch). Only the global count must exceed 1, so a replica may
// hold a single value per channel. A backward follows its forward: one after a synced forward
// needs batch_norm_sync too. Either layout (NCHW, NHWC) and any float dtype is taken: bf16 and f16
// are cast to f32 by the backend, the host computes in double from the f32 values, and y and dx
// come back in x's dtype. It computes on the host for every backend: on a GPU each forward and
// backward copies x (and dy) to the host, waits for the stream, and copies the result back --
// correct, but slow; a device kernel is future work.
#pragma once

#include <cstdint>
#include <vector>

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
  Tensor forward_synced(const Tensor& x, Context& ctx);
  Tensor backward_synced(const Tensor& dy, Context& ctx);

  BatchNorm2dOptions options_;
  Tensor running_mean_;
  Tensor running_var_;
  Tensor saved_mean_;  // the batch's statistics, kept by forward for backward with the input
  Tensor saved_invstd_;
  // A synced forward's statistics over all replicas, on the host (empty when the last training
  // forward was not synced), and the global count of values per channel.
  std::vector<double> synced_mean_;
  std::vector<double> synced_invstd_;
  double synced_count_ = 0;
};

}  // namespace stoke::nn
