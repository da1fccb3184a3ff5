// PinnedAllocator: page-locked host memory for nodes::BatchPool, so that batches cross to the
// device with asynchronous copies.
//
//   stoke::nodes::BatchPool pool(shape, 4, stoke::gpu::pinned_allocator());
#pragma once

#include "stoke/gpu/device.hpp"
#include "stoke/nodes/allocator.hpp"

namespace stoke::gpu {

/// cudaHostAlloc (portable: usable with every device). Thread-safe.
class PinnedAllocator final : public nodes::Allocator {
 public:
  std::string_view name() const noexcept override { return "cuda-pinned"; }

 protected:
  void* allocate_impl(std::size_t bytes, std::size_t alignment) override;
  void deallocate_impl(void* block, std::size_t bytes, std::size_t alignment) noexcept override;
};

/// A PinnedAllocator. Throws DeviceError in a build without CUDA.
nodes::AllocatorPtr pinned_allocator();

/// The allocator batches for `device` should come from: pinned for a CUDA device, the host
/// allocator for the CPU.
nodes::AllocatorPtr batch_allocator(Device device);

}  // namespace stoke::gpu
