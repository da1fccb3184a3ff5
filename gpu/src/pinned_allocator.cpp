#include "stoke/gpu/pinned_allocator.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "stoke/gpu/error.hpp"

#if STOKE_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace stoke::gpu {

#if STOKE_HAS_CUDA

namespace {
// The largest alignment asked of this allocator (BatchPool asks for a page).
constexpr std::size_t max_pinned_alignment = 4096;

// cudaHostAlloc's blocks are not always page-aligned: on the first GPU run (an H200 in a
// Firecracker VM, driver 580) blocks of under a megabyte came back at other offsets. So every
// block is over-allocated by `alignment` bytes; the caller gets the first aligned address after a
// header, which holds what cudaHostAlloc returned, for cudaFreeHost.
struct Header {
  void* block;
};

// The bytes beyond the caller's: the header, and the most the alignment can skip.
std::size_t header_room(std::size_t alignment) { return sizeof(Header) + alignment - 1; }
}  // namespace

void* PinnedAllocator::allocate_impl(std::size_t bytes, std::size_t alignment) {
  if (alignment > max_pinned_alignment)
    throw std::invalid_argument("allocator 'cuda-pinned': alignment " + std::to_string(alignment) +
                                " exceeds the page alignment (" + std::to_string(max_pinned_alignment) +
                                ") that cudaHostAlloc guarantees");
  alignment = std::max<std::size_t>(alignment, alignof(Header));
  const std::size_t room = header_room(alignment);
  void* block = nullptr;
  const cudaError_t error = cudaHostAlloc(&block, bytes + room, cudaHostAllocPortable);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;  // Allocator::allocate turns this into AllocationError
  }
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    if (cuda_device_count() == 0)
      throw DeviceError("allocator 'cuda-pinned' needs a usable CUDA device, and " + cuda_unavailable_reason());
    detail::throw_cuda_error(error, "cudaHostAlloc(&block, bytes, cudaHostAllocPortable)", __FILE__, __LINE__);
  }
  // The first aligned address with a header's room before it; it lies within `room` of the block.
  const auto start = reinterpret_cast<std::uintptr_t>(block) + sizeof(Header);
  const std::uintptr_t aligned = (start + alignment - 1) / alignment * alignment;
  auto* header = reinterpret_cast<Header*>(aligned - sizeof(Header));
  header->block = block;
  return reinterpret_cast<void*>(aligned);
}

void PinnedAllocator::deallocate_impl(void* block, std::size_t /*bytes*/, std::size_t /*alignment*/) noexcept {
  const auto* header = reinterpret_cast<const Header*>(static_cast<char*>(block) - sizeof(Header));
  STOKE_CUDA_REPORT(cudaFreeHost(header->block));
}

nodes::AllocatorPtr pinned_allocator() {
  static const nodes::AllocatorPtr instance = std::make_shared<PinnedAllocator>();
  return instance;
}

#else  // a build without CUDA: there is no pinned memory to give

namespace {
constexpr const char* no_pinned_memory =
    "pinned memory needs a stoke built with CUDA (reconfigure with -DSTOKE_CUDA=ON); batches for the CPU device come "
    "from nodes::host_allocator() (see batch_allocator())";
}  // namespace

void* PinnedAllocator::allocate_impl(std::size_t /*bytes*/, std::size_t /*alignment*/) {
  throw DeviceError(no_pinned_memory);
}

// Nothing can have been allocated.
void PinnedAllocator::deallocate_impl(void* /*block*/, std::size_t /*bytes*/, std::size_t /*alignment*/) noexcept {}

nodes::AllocatorPtr pinned_allocator() { throw DeviceError(no_pinned_memory); }

#endif

nodes::AllocatorPtr batch_allocator(Device device) {
  return device.is_cuda() ? pinned_allocator() : nodes::host_allocator();
}

}  // namespace stoke::gpu
