// Timeline: when each batch's copy and compute ran on the GPU, measured with CUDA events, on one
// clock. What shows that copies overlap compute, and what a trace draws as GPU tracks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/event.hpp"
#include "stoke/gpu/stream.hpp"

namespace stoke::gpu {

struct GpuSpan {
  enum class Kind : std::uint8_t { copy, compute };
  Kind kind = Kind::copy;
  std::uint64_t batch = 0;  ///< DeviceBatch::sequence()
  int lane = 0;             ///< the compute stream's number (0 for copies)
  double start_ms = 0;      ///< since the timeline's reference event
  double end_ms = 0;
};

/// Thread-safe. Keeps at most `max_spans` spans (the first ones).
class Timeline {
 public:
  /// CUDA: records a reference event on a stream of its own and waits for it once (setup, not
  /// steady state). The CPU device has no GPU timeline: add() is then never called.
  explicit Timeline(Device device, std::size_t max_spans = std::size_t{1} << 16);

  /// Adds a span between two timing events that have both completed.
  void add(GpuSpan::Kind kind, std::uint64_t batch, int lane, const Event& start, const Event& end);
  std::vector<GpuSpan> spans() const;
  Device device() const noexcept { return device_; }

 private:
  Device device_;
  std::size_t max_spans_;
  std::optional<Stream> stream_;
  std::optional<Event> reference_;
  mutable std::mutex mutex_;
  std::vector<GpuSpan> spans_;
};

}  // namespace stoke::gpu
