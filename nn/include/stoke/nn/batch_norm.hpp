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
//
// Fused ReLU and residual join (ResNet's BN -> ReLU and BN -> add -> ReLU): with options.relu the
// layer is batch norm and a ReLU in one, y = max(bn(x), 0); the two-operand forward adds a residual
// before the ReLU, y = max(bn(x) + residual, 0), and its backward gives the residual's gradient
// too. On CUDA with channels-last images each is one pass over the activations (the backend's
// batch_norm_relu_* kernels); elsewhere the backend composes batch norm, add and ReLU, with the
// results of the separate layers bit for bit. A synced forward composes them on its own.
//
//   BatchNorm2d bn3({.channels = 256, .relu = true});
//   Tensor y = bn3.forward(h, shortcut, ctx);          // max(bn3(h) + shortcut, 0)
//   Tensor dshortcut;
//   Tensor dh = bn3.backward(dy, ctx, dshortcut);
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
  /// A ReLU fused after the normalisation (and after the residual, in the two-operand forward).
  bool relu = false;
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

  const BatchNorm2dOptions& options() const noexcept { return options_; }

  using Layer::backward;
  using Layer::forward;
  /// y = max(bn(x) + residual, 0): a residual block's join (options.relu must be set; the
  /// residual has x's shape, dtype and layout). Throws std::invalid_argument naming the layer
  /// otherwise.
  Tensor forward(const Tensor& x, const Tensor& residual, Context& ctx);
  /// The backward of that forward: returns x's gradient and sets `dresidual` to the residual's.
  Tensor backward(const Tensor& dy, Context& ctx, Tensor& dresidual);

  /// "running_mean" and "running_var".
  void for_each_buffer(const BufferVisitor& visit, const std::string& prefix = {}) override;
  void release_activations() override;
  /// PyTorch's repr, with ", relu=True" when the ReLU is fused.
  std::string describe() const override;

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  // forward and backward with an optional residual (undefined: none; dresidual null: not wanted).
  Tensor forward_joined(const Tensor& x, const Tensor& residual, Context& ctx);
  Tensor backward_joined(const Tensor& dy, Context& ctx, Tensor* dresidual);
  // y (batch norm's output, written in place): + residual, then the ReLU.
  void finish_in_place(const Tensor& y, const Tensor& residual, Backend& backend) const;
  Tensor forward_synced(const Tensor& x, Context& ctx);
  Tensor backward_synced(const Tensor& dy, Context& ctx);

  BatchNorm2dOptions options_;
  Tensor running_mean_;
  Tensor running_var_;
  Tensor saved_mean_;  // the batch's statistics, kept by forward for backward with the input
  Tensor saved_invstd_;
  Tensor output_;        // with options.relu, the training forward's output, whose sign masks dy
  bool joined_ = false;  // the last training forward had a residual
  // A synced forward's statistics over all replicas, on the host (empty when the last training
  // forward was not synced), and the global count of values per channel.
  std::vector<double> synced_mean_;
  std::vector<double> synced_invstd_;
  double synced_count_ = 0;
};

}  // namespace stoke::nn
