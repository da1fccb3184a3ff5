#include "stoke/gpu/timeline.hpp"

#include <utility>

namespace stoke::gpu {

Timeline::Timeline(Device device, std::size_t max_spans) : device_(device), max_spans_(max_spans) {
  if (device_.is_cpu()) return;
  stream_.emplace(device_);
  reference_.emplace(device_, EventOptions{.timing = true, .blocking_sync = true});
  reference_->record(*stream_);
  reference_->synchronize();
}

void Timeline::add(GpuSpan::Kind kind, std::uint64_t batch, int lane, const Event& start, const Event& end) {
  if (!reference_) return;
  {
    std::lock_guard lock(mutex_);
    if (spans_.size() >= max_spans_) return;
  }
  const double start_ms = Event::elapsed(*reference_, start).count();
  const double end_ms = Event::elapsed(*reference_, end).count();
  std::lock_guard lock(mutex_);
  if (spans_.size() < max_spans_) spans_.push_back(GpuSpan{kind, batch, lane, start_ms, end_ms});
}

std::vector<GpuSpan> Timeline::spans() const {
  std::lock_guard lock(mutex_);
  return spans_;
}

}  // namespace stoke::gpu
