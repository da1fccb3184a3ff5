// Event: a CUDA event, the way work on one stream is ordered after work on another, and the way
// the host learns (without spinning) that work is done.
#pragma once

#include <chrono>

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/stream.hpp"

struct CUevent_st;

namespace stoke::gpu {

struct EventOptions {
  /// Record timestamps, for elapsed(). Costs a little; off for pure synchronization.
  bool timing = false;
  /// synchronize() sleeps in the driver (cudaEventBlockingSync) instead of spinning a core.
  bool blocking_sync = true;
};

/// An owned CUDA event. Move-only; the destructor never throws.
class Event {
 public:
  /// Throws DeviceError for the CPU device or a build without CUDA, CudaError when CUDA fails.
  explicit Event(Device device, EventOptions options = {});
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  /// Captures the work enqueued on `stream` so far (cudaEventRecord).
  void record(StreamView stream);
  /// True when the captured work is done (or the event was never recorded).
  bool ready() const;
  /// Blocks the calling thread until the captured work is done (sleeping, with blocking_sync).
  void synchronize() const;

  /// Time between two recorded, completed events with timing on (cudaEventElapsedTime).
  static std::chrono::duration<double, std::milli> elapsed(const Event& start, const Event& end);

  Device device() const noexcept { return device_; }
  CUevent_st* native() const noexcept { return event_; }

 private:
  void reset() noexcept;
  Device device_;
  CUevent_st* event_ = nullptr;
};

}  // namespace stoke::gpu
