// Keeping data-parallel replicas identical: the training state broadcast from rank 0 (at the start
// and after a resume), a checksum of it compared across the ranks, and the sum that sync batch
// norm runs over a communicator.
//
//   broadcast_state(*comm, model, &trainer.optimizer(), backend.stream());
//   check_replicas(*comm, model, &trainer.optimizer(), backend.stream(), "the start");
#pragma once

#include <cstdint>
#include <memory>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/optimizer.hpp>
#include <stoke/nn/replicas.hpp>
#include <string>

#include "stoke/dist/communicator.hpp"

namespace stoke::dist {

/// nn::ReplicaSum over a communicator of its own (comm.split(): sync batch norm sums from the
/// training thread while the gradient thread uses another).
class CommunicatorSum final : public nn::ReplicaSum {
 public:
  explicit CommunicatorSum(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}
  void sum(std::span<double> values) override { comm_->all_reduce(values, ReduceOp::sum); }

 private:
  std::unique_ptr<Communicator> comm_;
};

/// Copies rank `root`'s parameters, buffers (batch norm's running statistics) and, when given, the
/// optimizer's state to every rank. Tensors on a GPU make a round trip through the host (`stream`
/// orders it); every rank's model must have the same structure.
void broadcast_state(Communicator& comm, nn::Layer& model, nn::Optimizer* optimizer, nn::StreamView stream,
                     int root = 0);

/// An FNV-1a checksum of the parameters' values, the optimizer's state (when given) and, with
/// `buffers`, the model's buffers (batch norm's running statistics differ between the ranks unless
/// batch norm is synced).
std::uint64_t state_checksum(nn::Layer& model, nn::Optimizer* optimizer, nn::StreamView stream, bool buffers = true);

/// Compares every rank's state_checksum with rank 0's. Throws std::runtime_error naming the ranks
/// whose state differs and `when` ("the start", "epoch 3") -- replicas that drifted apart would
/// train different models while reporting one.
void check_replicas(Communicator& comm, nn::Layer& model, nn::Optimizer* optimizer, nn::StreamView stream,
                    const std::string& when, bool buffers = true);

}  // namespace stoke::dist
