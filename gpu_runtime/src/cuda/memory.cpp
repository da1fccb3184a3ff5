#include "stoke/gpu/memory.hpp"

#include <cuda_runtime_api.h>

#include <cstring>
#include <utility>

#include "../internal.hpp"
#include "cuda_internal.hpp"
#include "stoke/gpu/error.hpp"

namespace stoke::gpu {

// ---- DeviceBuffer ----------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(Device device, std::size_t bytes) : device_(device) {
  detail::require_cuda_device(device, "a DeviceBuffer");
  if (bytes == 0) return;
  const DeviceGuard guard(device);
  void* block = nullptr;
  const cudaError_t error = cudaMalloc(&block, bytes);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    std::string context = device.str() + ": out of memory allocating " + detail::format_bytes(bytes);
    std::size_t free = 0;
    std::size_t total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess)
      context += " (free " + detail::format_bytes(free) + " of " + detail::format_bytes(total) + ")";
    (void)cudaGetLastError();
    throw CudaOutOfMemory("CUDA", error, cudaGetErrorName(error), cudaGetErrorString(error),
                          "cudaMalloc(&block, bytes)", __FILE__, __LINE__, std::move(context));
  }
  if (error != cudaSuccess) detail::throw_cuda_error(error, "cudaMalloc(&block, bytes)", __FILE__, __LINE__);
  data_ = block;
  bytes_ = bytes;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : device_(other.device_), data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() noexcept {
  // cudaFree waits for the device's work, so no kernel still reads the block it frees.
  if (data_ != nullptr) {
    const detail::CleanupDeviceScope scope(device_);
    STOKE_CUDA_REPORT(cudaFree(data_));
  }
  data_ = nullptr;
  bytes_ = 0;
}

// ---- PinnedBuffer ----------------------------------------------------------------------------

PinnedBuffer::PinnedBuffer(std::size_t bytes) {
  if (bytes == 0) return;
  void* block = nullptr;
  const cudaError_t error = cudaHostAlloc(&block, bytes, cudaHostAllocPortable);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    if (error == cudaErrorMemoryAllocation)
      throw CudaOutOfMemory("CUDA", error, cudaGetErrorName(error), cudaGetErrorString(error),
                            "cudaHostAlloc(&block, bytes, cudaHostAllocPortable)", __FILE__, __LINE__,
                            "out of page-locked host memory pinning " + detail::format_bytes(bytes));
    if (cuda_device_count() == 0)
      throw DeviceError("a PinnedBuffer needs a usable CUDA device, and " + cuda_unavailable_reason());
    detail::throw_cuda_error(error, "cudaHostAlloc(&block, bytes, cudaHostAllocPortable)", __FILE__, __LINE__);
  }
  data_ = static_cast<std::byte*>(block);
  bytes_ = bytes;
}

PinnedBuffer::~PinnedBuffer() { reset(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PinnedBuffer::reset() noexcept {
  if (data_ != nullptr) STOKE_CUDA_REPORT(cudaFreeHost(data_));
  data_ = nullptr;
  bytes_ = 0;
}

// ---- copies ----------------------------------------------------------------------------------

void copy_async(void* dst, const void* src, std::size_t bytes, StreamView stream) {
  if (bytes == 0) return;
  if (stream.is_host()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const cudaStream_t native = detail::native_stream(stream, "copy_async");
  const DeviceGuard guard(stream.device());
  STOKE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native));
}

void fill_async(void* dst, int value, std::size_t bytes, StreamView stream) {
  if (bytes == 0) return;
  if (stream.is_host()) {
    std::memset(dst, value, bytes);
    return;
  }
  const cudaStream_t native = detail::native_stream(stream, "fill_async");
  const DeviceGuard guard(stream.device());
  STOKE_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, native));
}

MemoryInfo memory_info(Device device) {
  detail::require_cuda_device(device, "memory_info()");
  const DeviceGuard guard(device);
  MemoryInfo info;
  STOKE_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
  return info;
}

}  // namespace stoke::gpu
