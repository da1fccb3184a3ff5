// Device and pinned host memory, owned; and the copies between them, always on a stream.
#pragma once

#include <cstddef>
#include <span>

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/stream.hpp"

namespace stoke::gpu {

/// Device memory (cudaMalloc), allocated once and owned. Move-only; the destructor frees it and
/// never throws. Throws CudaOutOfMemory naming the size and the device's free memory when the
/// device is full, DeviceError for the CPU device or a build without CUDA.
class DeviceBuffer {
 public:
  DeviceBuffer() noexcept = default;
  DeviceBuffer(Device device, std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// Device pointer: never dereference it on the host.
  void* data() const noexcept { return data_; }
  template <class T>
  T* as() const noexcept {
    return static_cast<T*>(data_);
  }
  std::size_t size() const noexcept { return bytes_; }
  bool empty() const noexcept { return data_ == nullptr; }
  Device device() const noexcept { return device_; }

 private:
  void reset() noexcept;
  Device device_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Page-locked host memory (cudaHostAlloc, portable across devices), which the GPU can copy from
/// asynchronously. Move-only; the destructor frees it and never throws.
class PinnedBuffer {
 public:
  PinnedBuffer() noexcept = default;
  /// Throws DeviceError in a build without CUDA or when no CUDA device is usable, CudaError
  /// (CudaOutOfMemory) when the memory cannot be pinned.
  explicit PinnedBuffer(std::size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }
  std::span<std::byte> bytes() const noexcept { return {data_, bytes_}; }

 private:
  void reset() noexcept;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Enqueues a copy of `bytes` from `src` to `dst` on `stream` (cudaMemcpyAsync with
/// cudaMemcpyDefault: either side may be host, pinned or device memory). Asynchronous only when
/// host memory is pinned. On the host stream (CPU device) it is a plain memcpy.
void copy_async(void* dst, const void* src, std::size_t bytes, StreamView stream);
/// Enqueues a fill of `bytes` at device pointer `dst` with `value` (cudaMemsetAsync); memset on
/// the host stream.
void fill_async(void* dst, int value, std::size_t bytes, StreamView stream);

/// Free and total memory of a CUDA device, in bytes (cudaMemGetInfo).
struct MemoryInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};
MemoryInfo memory_info(Device device);

}  // namespace stoke::gpu
