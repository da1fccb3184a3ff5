// DataParallel: what one rank of a data-parallel run owns beside its model, chosen once when the
// run is put together -- the gradient sync over the ranks (NCCL on GPUs, MPI on a thread of its own
// on CPU ranks) and, with sync_bn, batch norm's sums over every rank's batch -- and where it plugs
// into the Trainer. train::Run (run.hpp) makes one when it is given a communicator; by hand:
//
//   const auto comm = dist::connect();
//   const ComputeContext machine = make_compute(rank_device("auto", *comm), &std::cerr);
//   auto model = make_model(recipe, classes, *machine.backend);
//   DataParallel replicas(*comm, machine.device, *machine.backend, *model, {.sync_bn = true});
//   nn::TrainerOptions options = trainer_options(recipe, train_size / comm->world());
//   replicas.attach(options);
//   nn::Trainer trainer(*model, *machine.backend, options);   // replicas outlives trainer
//
// fit() does the rest of a rank's part (the shares of each epoch, the broadcast of the state, the
// stop votes and the checkpoint barrier) from FitOptions::communicator.
#pragma once

#include <cstddef>
#include <memory>
#include <stoke/dist/communicator.hpp>
#include <stoke/gpu/device.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>

namespace stoke::dist {
class GradientSync;
class NcclCommunicator;
class CommunicatorSum;
}  // namespace stoke::dist

namespace stoke::train {

struct DataParallelOptions {
  /// Bytes of gradients per all-reduce bucket (started as soon as backward has filled it).
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// Batch norm's statistics over every rank's batch (default: each rank's own).
  bool sync_bn = false;
};

/// `device` for this rank: with more than one rank, "cuda" (or "auto" on a machine with a GPU)
/// becomes "cuda:<local rank>" (modulo the GPUs), one GPU per local rank; otherwise `device` as given.
std::string rank_device(const std::string& device, const dist::Communicator& comm);

class DataParallel {
 public:
  /// With comm.world() > 1: the gradient sync of `model` over the ranks -- over NCCL when `device`
  /// is a GPU (libnccl.so.2 loaded now, its id shared through `comm`), else over MPI on a split of
  /// `comm` -- and with options.sync_bn the batch norm sums on another split. With one rank:
  /// nothing. Throws what dist throws (NCCL missing, a rank that does not answer). `comm`,
  /// `backend` and `model` must outlive it.
  DataParallel(dist::Communicator& comm, const gpu::Device& device, nn::Backend& backend, nn::Layer& model,
               DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// Whether there is more than one rank.
  bool active() const noexcept { return static_cast<bool>(gradient_sync_); }
  /// Points `options` at the gradient sync and the batch norm sums (leaves it as it is when not
  /// active). The Trainer built from it must not outlive this.
  void attach(nn::TrainerOptions& options) const noexcept;
  /// "2 ranks (MPI ...), gradients over NCCL ..., 4 gradient buckets, batch norm synced"; "" when
  /// not active.
  std::string describe() const;

 private:
  const dist::Communicator* comm_;
  bool sync_bn_;
  std::unique_ptr<dist::NcclCommunicator> nccl_;
  std::unique_ptr<dist::GradientSync> gradient_sync_;
  std::unique_ptr<dist::CommunicatorSum> batch_norm_sync_;
};

}  // namespace stoke::train
