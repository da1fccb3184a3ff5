// DataParallel gradient sync: a model's parameter gradients summed over the ranks in buckets that
// start while backward still runs (PyTorch DDP's overlap), for nn::Trainer
// (TrainerOptions::gradient_sync).
//
//   auto comm = dist::connect();
//   dist::GradientSync sync(model, backend, dist::host_transport(comm->split()));   // CPU ranks
//   nn::Trainer trainer(model, backend, {.schedule = ..., .gradient_sync = &sync});
//
// The buckets hold the parameters in the reverse of their registration order (about the order in
// which backward finishes them), up to bucket_bytes each. When a layer's backward is done
// (nn::GradientSync::ready) its parameters are marked; a bucket whose parameters are all marked
// starts on the transport; finish() starts what is left and waits. Buckets start in the same
// order on every rank, whatever the timing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/replicas.hpp>
#include <stoke/nn/tensor.hpp>
#include <unordered_map>
#include <vector>

#include "stoke/dist/communicator.hpp"

namespace stoke::dist {

/// What a transport measured, summed since it was made.
struct TransportStats {
  std::int64_t syncs = 0;      ///< finish() calls (optimizer steps whose gradients were summed)
  std::int64_t buckets = 0;    ///< buckets summed
  std::int64_t bytes = 0;      ///< gradient bytes summed (this rank's share sent)
  double reduce_seconds = 0;   ///< time the buckets were being summed (the collectives' own time)
  double exposed_seconds = 0;  ///< time finish() waited for them: the part not hidden under backward
  /// 0..1: the share of the reduction that ran while backward was still computing.
  double hidden() const noexcept {
    return reduce_seconds > 0 ? std::max(0.0, 1.0 - exposed_seconds / reduce_seconds) : 0;
  }
};

/// Moves GradientSync's buckets between the ranks.
class BucketTransport {
 public:
  virtual ~BucketTransport() = default;
  /// The ranks the sums run over.
  virtual int world() const noexcept = 0;
  /// Sums bucket `index` -- `gradients`, f32 tensors on the backend's device, final in the order of
  /// the backend's stream -- over the ranks. Called in increasing index order from 0 within a sync,
  /// every index once.
  virtual void start(std::size_t index, std::span<const nn::Tensor> gradients) = 0;
  /// After every bucket has started: once this returns, the gradients hold the sums in the
  /// backend stream's order (a host transport waits for them; a device one orders the stream
  /// after its own).
  virtual void finish() = 0;
  virtual TransportStats stats() const = 0;
};

/// Sums host (CPU) tensors over `channel` (an MPI communicator of their own, e.g.
/// comm.split()) on a thread of the transport's: Open MPI progresses a collective only inside MPI
/// calls, so the thread runs each bucket's all-reduce to its end while backward goes on.
std::unique_ptr<BucketTransport> host_transport(std::unique_ptr<Communicator> channel);

struct GradientSyncOptions {
  /// A bucket closes when it reaches this many bytes of gradients (PyTorch DDP: 25 MiB). Smaller
  /// buckets start earlier and overlap more, larger ones pay less per-collective latency.
  std::size_t bucket_bytes = std::size_t{25} << 20;
};

class GradientSync final : public nn::GradientSync {
 public:
  /// The buckets of `model`'s parameters (their gradients allocated here if needed, zero).
  GradientSync(nn::Layer& model, nn::Backend& backend, std::unique_ptr<BucketTransport> transport,
               const GradientSyncOptions& options = {});

  int replicas() const noexcept override { return transport_->world(); }
  void begin() override;
  void ready(nn::Layer& layer) override;
  void finish() override;
  double reduce_seconds() const override { return transport_->stats().reduce_seconds; }
  double exposed_seconds() const override { return transport_->stats().exposed_seconds; }

  std::size_t buckets() const noexcept { return buckets_.size(); }
  TransportStats stats() const { return transport_->stats(); }

 private:
  struct Bucket {
    std::vector<nn::Parameter*> parameters;
    std::size_t pending = 0;  // parameters not yet ready in this sync
  };
  void start_ready_buckets();

  nn::Layer& model_;
  nn::Backend& backend_;
  std::unique_ptr<BucketTransport> transport_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const nn::Parameter*, std::size_t> bucket_of_;
  std::vector<bool> marked_;  // by bucket_of_'s parameter order: ready in this sync
  std::unordered_map<const nn::Parameter*, std::size_t> slot_of_;
  std::size_t next_ = 0;  // the next bucket to start
  bool open_ = false;     // between begin() and finish()
};

}  // namespace stoke::dist
