#include "stoke/gpu/pinned_allocator.hpp"

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
// cudaHostAlloc maps whole pages, so its blocks start on a page; a larger alignment would need
// over-allocation, which no caller wants (BatchPool asks for a page).
constexpr std::size_t max_pinned_alignment = 4096;
}  // namespace

void* PinnedAllocator::allocate_impl(std::size_t bytes, std::size_t alignment) {
  if (alignment > max_pinned_alignment)
    throw std::invalid_argument("allocator 'cuda-pinned': alignment " + std::to_string(alignment) +
                                " exceeds the page alignment (" + std::to_string(max_pinned_alignment) +
                                ") that cudaHostAlloc guarantees");
  void* block = nullptr;
  const cudaError_t error = cudaHostAlloc(&block, bytes, cudaHostAllocPortable);
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
  if (reinterpret_cast<std::uintptr_t>(block) % alignment != 0) {
    STOKE_CUDA_REPORT(cudaFreeHost(block));
    throw std::runtime_error("allocator 'cuda-pinned': cudaHostAlloc returned a block not aligned to " +
                             std::to_string(alignment) + " bytes");
  }
  return block;
}

void PinnedAllocator::deallocate_impl(void* block, std::size_t /*bytes*/, std::size_t /*alignment*/) noexcept {
  STOKE_CUDA_REPORT(cudaFreeHost(block));
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
