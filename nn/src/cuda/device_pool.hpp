// DevicePool: the caching allocator behind CudaBackend::empty(). A training step allocates the
// same tensors step after step; cudaMalloc and cudaFree are slow and cudaFree synchronises the
// device, so blocks are kept and reused instead.
//
// Blocks are binned by their size rounded up (to 512 bytes below 1 MiB, to a quarter of the
// power of two at or below the size above that), and a freed block goes back to its bin when the
// last copy of its Tensor goes (the shared_ptr's deleter).
//
// Why reuse is safe without events: every kernel the backend runs is on its one stream. A block
// is returned while work that uses it may still be queued, but whoever gets it next enqueues its
// own work on that same stream, which runs after everything queued before it. So a tensor from
// empty() must be used on the backend's stream only (a copy to the host on another stream must
// finish before the tensor is dropped).
//
// The pool's state is shared with the deleters, so tensors may outlive the backend: once the
// pool is closed (the backend destroyed) a returned block is freed at once. Thread-safe: a
// tensor may be dropped on any thread.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "stoke/nn/device.hpp"

namespace stoke::nn::cuda {

class DevicePool {
 public:
  explicit DevicePool(Device device);
  ~DevicePool();  // closes the pool: cached blocks are freed, blocks in use are freed on return
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  /// At least `bytes` of device memory (256-byte aligned, never null), owned by the returned
  /// pointer, which hands the block back to the pool. When the device is full, the cached blocks
  /// are freed and the allocation is tried once more before CudaOutOfMemory escapes.
  std::shared_ptr<void> allocate(std::size_t bytes);

  /// Frees every cached block (not those in use).
  void release_cached();

  /// The size a request of `bytes` is rounded up to (exposed for tests).
  static std::size_t bin_size(std::size_t bytes) noexcept;

  struct Stats {
    std::size_t cached_bytes = 0;  ///< held, free for reuse
    std::size_t in_use_bytes = 0;  ///< handed out
    std::size_t driver_allocations = 0;
  };
  Stats stats() const;

 private:
  struct State {
    Device device;
    mutable std::mutex mutex;
    bool open = true;
    std::map<std::size_t, std::vector<DeviceBuffer>> free;  // by bin size
    Stats stats;
  };
  static void give_back(const std::shared_ptr<State>& state, DeviceBuffer block) noexcept;

  std::shared_ptr<State> state_;
};

}  // namespace stoke::nn::cuda
