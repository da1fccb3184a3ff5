#include "stoke/train/data_parallel.hpp"

#include <algorithm>
#include <stoke/dist/gradient_sync.hpp>
#include <stoke/dist/nccl.hpp>
#include <stoke/dist/replicas.hpp>
#include <stoke/gpu/device.hpp>
#include <utility>

namespace stoke::train {

std::string rank_device(const std::string& device, const dist::Communicator& comm) {
  if (comm.world() == 1) return device;
  const int gpus = gpu::cuda_device_count();
  if (device == "cuda" || (device == "auto" && gpus > 0)) {
    return "cuda:" + std::to_string(comm.local_rank() % std::max(1, gpus));
  }
  return device;
}

DataParallel::DataParallel(dist::Communicator& comm, const gpu::Device& device, nn::Backend& backend, nn::Layer& model,
                           DataParallelOptions options)
    : comm_(&comm), sync_bn_(options.sync_bn) {
  if (comm.world() == 1) return;
  std::unique_ptr<dist::BucketTransport> transport;
  if (device.is_cpu()) {
    transport = dist::host_transport(comm.split());
  } else {
    nccl_ = std::make_unique<dist::NcclCommunicator>(comm, device);
    transport = dist::nccl_transport(*nccl_, backend);
  }
  gradient_sync_ = std::make_unique<dist::GradientSync>(
      model, backend, std::move(transport), dist::GradientSyncOptions{.bucket_bytes = options.bucket_bytes});
  if (options.sync_bn) batch_norm_sync_ = std::make_unique<dist::CommunicatorSum>(comm.split());
}

DataParallel::~DataParallel() = default;

void DataParallel::attach(nn::TrainerOptions& options) const noexcept {
  if (!active()) return;
  options.gradient_sync = gradient_sync_.get();
  if (batch_norm_sync_) options.batch_norm_sync = batch_norm_sync_.get();
}

std::string DataParallel::describe() const {
  if (!active()) return "";
  return std::to_string(comm_->world()) + " ranks (" + comm_->describe() +
         (nccl_ ? ", gradients over " + nccl_->describe() : std::string()) + "), " +
         std::to_string(gradient_sync_->buckets()) +
         (gradient_sync_->buckets() == 1 ? " gradient bucket" : " gradient buckets") +
         (sync_bn_ ? ", batch norm synced" : "");
}

}  // namespace stoke::train
