// nccl_transport (nccl.hpp): GradientSync's buckets summed on the device, ordered against the
// compute stream by events, never by a host wait.
//
//   compute:   ...backward... [record ready] ...backward...                [wait done] step
//   transport:                [wait ready] pack -> all-reduce -> unpack    [record done]
#include <cstddef>
#include <stdexcept>
#include <stoke/gpu/event.hpp>
#include <stoke/gpu/memory.hpp>
#include <string>
#include <vector>

#include "stoke/dist/nccl.hpp"

namespace stoke::dist {
namespace {

class NcclTransport final : public BucketTransport {
 public:
  NcclTransport(NcclCommunicator& nccl, gpu::StreamView compute)
      : nccl_(nccl), compute_(compute), stream_(nccl.device()), ready_(nccl.device()), done_(nccl.device()) {}

  int world() const noexcept override { return nccl_.world(); }

  void start(std::size_t index, std::span<const nn::Tensor> gradients) override {
    std::size_t bytes = 0;
    for (const nn::Tensor& gradient : gradients) {
      if (gradient.dtype() != nn::DType::f32 || gradient.device() != nccl_.device())
        throw std::invalid_argument("nccl_transport: bucket " + std::to_string(index) + " holds " +
                                    gradient.describe() + "; NCCL sums f32 gradients on " + nccl_.device().str());
      bytes += gradient.bytes();
    }
    if (bytes == 0) return;

    // The gradients are final in the compute stream's order: the transport's stream starts there.
    ready_.record(compute_);
    stream_.wait(ready_);
    if (gradients.size() == 1) {  // one tensor: summed where it lies, nothing to pack
      nccl_.all_reduce_sum(gradients[0].data_as<float>(), bytes / sizeof(float), stream_);
    } else {
      gpu::DeviceBuffer& flat = flat_buffer(index, bytes);
      auto* base = static_cast<std::byte*>(flat.data());
      std::size_t offset = 0;
      for (const nn::Tensor& gradient : gradients) {
        gpu::copy_async(base + offset, gradient.data(), gradient.bytes(), stream_);
        offset += gradient.bytes();
      }
      nccl_.all_reduce_sum(flat.as<float>(), bytes / sizeof(float), stream_);
      offset = 0;
      for (const nn::Tensor& gradient : gradients) {
        gpu::copy_async(gradient.data(), base + offset, gradient.bytes(), stream_);
        offset += gradient.bytes();
      }
    }
    ++stats_.buckets;
    stats_.bytes += static_cast<std::int64_t>(bytes);
  }

  void finish() override {
    // The compute stream (the optimizer's step) goes on once the sums are back; the host does not wait.
    done_.record(stream_);
    compute_.wait(done_);
    ++stats_.syncs;
    nccl_.check();  // a communicator that failed since the last step (a peer gone) says so here
  }

  // reduce_seconds stays 0: the collectives run on the device, and timing them would need a host
  // wait for their events, which this transport exists to avoid. exposed_seconds is 0 as finish()
  // never waits.
  TransportStats stats() const override { return stats_; }

 private:
  // Bucket `index`'s packing buffer: made at its first sync, then reused (made again only if the
  // bucket's size changed).
  gpu::DeviceBuffer& flat_buffer(std::size_t index, std::size_t bytes) {
    if (index >= flat_.size()) flat_.resize(index + 1);
    if (flat_[index].size() != bytes) flat_[index] = gpu::DeviceBuffer(nccl_.device(), bytes);
    return flat_[index];
  }

  NcclCommunicator& nccl_;
  gpu::StreamView compute_;
  gpu::Stream stream_;
  gpu::Event ready_;  // the compute stream's work up to a bucket's start
  gpu::Event done_;   // the transport stream's work up to finish()
  // Destroyed first: cudaFree waits for the device, so the work that uses them is over first.
  std::vector<gpu::DeviceBuffer> flat_;
  TransportStats stats_;
};

}  // namespace

std::unique_ptr<BucketTransport> nccl_transport(NcclCommunicator& nccl, gpu::StreamView compute) {
  if (compute.is_host() || compute.device() != nccl.device())
    throw std::invalid_argument("nccl_transport: the gradients are computed on " + compute.device().str() +
                                ", but the NCCL communicator is on " + nccl.device().str() +
                                "; sum CPU gradients with dist::host_transport");
  return std::make_unique<NcclTransport>(nccl, compute);
}

std::unique_ptr<BucketTransport> nccl_transport(NcclCommunicator& nccl, nn::Backend& backend) {
  return nccl_transport(nccl, backend.stream());
}

}  // namespace stoke::dist
