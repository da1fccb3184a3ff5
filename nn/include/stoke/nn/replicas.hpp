// Data-parallel hooks: what a Trainer and its layers call when the model is one of several
// replicas training on different shares of each batch (stoke::dist implements them over MPI and
// NCCL; nn itself knows no transport).
//
//   TrainerOptions options{...};
//   options.gradient_sync = &sync;       // sums the gradients over the replicas during backward
//   options.batch_norm_sync = &sum;      // optional: batch norm with statistics over all replicas
#pragma once

#include <span>

namespace stoke::nn {

class Layer;

/// Sums small host arrays over the replicas, in place; every replica calls it at the same point
/// with arrays of the same length (sync batch norm's per-channel sums).
class ReplicaSum {
 public:
  virtual ~ReplicaSum() = default;
  virtual void sum(std::span<double> values) = 0;
};

/// Sums a backward's parameter gradients over the replicas while the backward runs. The Trainer
/// calls begin() before a backward whose gradients are to be summed (the last batch of an
/// accumulation group), ready() after each layer's backward (its parameter gradients are then
/// final; the work that computes them may still be queued on the backend's stream), and finish()
/// after the backward: from there on the gradients, in the stream's order, hold the sum over the
/// replicas. The Trainer divides by replicas() when it steps.
class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual int replicas() const noexcept = 0;
  virtual void begin() = 0;
  virtual void ready(Layer& layer) = 0;
  virtual void finish() = 0;
  /// Seconds the sums took since the sync was made, and the part of them finish() waited for (the
  /// rest was hidden under backward); 0 where a transport cannot time them without waiting.
  virtual double reduce_seconds() const { return 0; }
  virtual double exposed_seconds() const { return 0; }
};

}  // namespace stoke::nn
