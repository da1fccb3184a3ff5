// Stream and StreamView: a CUDA stream owned, and a stream referred to. Every GPU call in stoke
// takes the stream it runs on explicitly; nothing uses CUDA's legacy default stream.
//
//   stoke::gpu::Stream copy(device);                  // non-blocking w.r.t. the default stream
//   stoke::gpu::copy_async(dst, src, bytes, copy);    // enqueued; returns at once
//   ready.record(copy);
//   compute.view().wait(ready);                       // the compute stream waits, not the host
#pragma once

#include <cstdint>

#include "stoke/gpu/device.hpp"

// CUDA's opaque handle types (cudaStream_t is CUstream_st*), declared here so that this header
// does not need CUDA's.
struct CUstream_st;

namespace stoke::gpu {

class Event;

/// A non-owning reference to a stream of a device, or to the host (the CPU device's "stream",
/// on which work runs synchronously on the calling thread). Cheap to copy; valid while the
/// Stream it came from lives.
class StreamView {
 public:
  /// The host: work "enqueued" on it has already run when the call returns.
  constexpr StreamView() noexcept = default;
  constexpr StreamView(Device device, CUstream_st* stream) noexcept : device_(device), stream_(stream) {}
  static constexpr StreamView host() noexcept { return {}; }

  constexpr Device device() const noexcept { return device_; }
  constexpr bool is_host() const noexcept { return device_.is_cpu(); }
  /// The cudaStream_t (null for the host).
  constexpr CUstream_st* native() const noexcept { return stream_; }

  /// Blocks the calling thread until the stream's work is done. Not for the steady state of a
  /// pipeline: stages wait with events and EventWatcher instead. No-op on the host.
  void synchronize() const;
  /// Makes work enqueued on this stream from now on wait for `event` (cudaStreamWaitEvent); the
  /// host does not wait. No-op on the host.
  void wait(const Event& event) const;
  /// True when all work enqueued so far is done (always on the host).
  bool ready() const;

  friend constexpr bool operator==(const StreamView&, const StreamView&) = default;

 private:
  Device device_;
  CUstream_st* stream_ = nullptr;
};

/// How many times a thread of a oneTBB arena (a pipeline's worker) blocked on the GPU in
/// StreamView::synchronize() or Event::synchronize(), since the process started. A pipeline's steady
/// state should add none: stages enqueue, and EventWatcher threads do the waiting. For tests and
/// diagnostics.
std::uint64_t host_waits_on_pipeline_threads() noexcept;

enum class StreamPriority {
  normal,
  high,  ///< the device's greatest priority: e.g. for copies that compute waits on
};

/// An owned CUDA stream, created non-blocking (it does not synchronize with the legacy default
/// stream). Move-only; the destructor destroys the stream (CUDA lets enqueued work finish first)
/// and never throws.
class Stream {
 public:
  /// Throws DeviceError for the CPU device or a build without CUDA, CudaError when CUDA fails.
  explicit Stream(Device device, StreamPriority priority = StreamPriority::normal);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamView view() const noexcept { return {device_, stream_}; }
  operator StreamView() const noexcept { return view(); }  // NOLINT: a Stream is usable where a view is
  Device device() const noexcept { return device_; }
  CUstream_st* native() const noexcept { return stream_; }

  void synchronize() const { view().synchronize(); }
  void wait(const Event& event) const { view().wait(event); }
  bool ready() const { return view().ready(); }

 private:
  void reset() noexcept;
  Device device_;
  CUstream_st* stream_ = nullptr;
};

}  // namespace stoke::gpu
