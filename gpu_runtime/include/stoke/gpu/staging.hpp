// StagingPool: small results on their way from the device to the host (a batch's loss, its
// logits), read without waiting. A step enqueues a copy into a staging buffer on its stream and
// hands the buffer on with the batch; whoever learns that the stream has passed that point (the
// compute stage's event, see compute.hpp) reads it, and nobody synchronizes.
//
//   stoke::gpu::StagingPool staging(device);
//   stoke::gpu::Staged loss = staging.copy(stats_on_device, 2 * sizeof(float), stream);  // enqueued
//   ... once the stream has run it:
//   const float mean_loss = loss.as<float>()[0];
//
// Buffers are pinned host memory on a CUDA device (so that the copy is asynchronous) and plain
// host memory on the CPU device, where copy() is a memcpy. A buffer goes back to the pool when its
// Staged is destroyed, so a steady stream of batches allocates nothing: the pool holds as many
// buffers as were ever out at once, which the pipeline's capacities bound.
#pragma once

#include <cstddef>
#include <memory>
#include <span>

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/stream.hpp"

namespace stoke::gpu {

namespace detail {
struct StagingState;
struct StagingBuffer;
}  // namespace detail

/// One staging buffer, taken from a StagingPool: `size()` bytes of host memory. Move-only; the
/// destructor gives the buffer back (to be reused) and never throws. Reading it before the copy
/// into it has run (on a GPU: before the stream reached it) reads old bytes.
class Staged {
 public:
  Staged() noexcept;
  ~Staged();
  Staged(Staged&& other) noexcept;
  Staged& operator=(Staged&& other) noexcept;
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;

  std::byte* data() const noexcept;
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return buffer_ == nullptr; }
  template <class T>
  std::span<const T> as() const noexcept {
    return {reinterpret_cast<const T*>(data()), size_ / sizeof(T)};
  }

 private:
  friend class StagingPool;
  Staged(std::shared_ptr<detail::StagingState> pool, std::unique_ptr<detail::StagingBuffer> buffer,
         std::size_t size) noexcept;
  void reset() noexcept;

  std::shared_ptr<detail::StagingState> pool_;
  std::unique_ptr<detail::StagingBuffer> buffer_;
  std::size_t size_ = 0;
};

/// Where Staged buffers come from. A cheap handle: copies share the buffers. Thread-safe; buffers
/// may outlive the pool handle.
class StagingPool {
 public:
  /// Pinned buffers for a CUDA device (created when first needed), host memory for the CPU.
  explicit StagingPool(Device device);

  /// A buffer of at least `bytes` (a free one when there is one, else a new one).
  Staged take(std::size_t bytes);
  /// take(bytes), and a copy of `bytes` from `src` (device memory of the pool's device, or host
  /// memory) into it enqueued on `stream`; on the host stream the copy is done on return.
  Staged copy(const void* src, std::size_t bytes, StreamView stream);

  Device device() const noexcept;
  /// Buffers made so far (in use or free): the most that were out at once.
  std::size_t buffers() const;

 private:
  std::shared_ptr<detail::StagingState> state_;
};

}  // namespace stoke::gpu
