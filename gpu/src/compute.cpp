#include "stoke/gpu/compute.hpp"

#include <algorithm>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "device_slots.hpp"
#include "stoke/gpu/event_watcher.hpp"
#include "stoke/gpu/memory.hpp"

namespace stoke::gpu::detail {

namespace {

ComputeOptions checked(ComputeOptions options) {
  if (options.streams < 1)
    throw std::invalid_argument("compute: streams must be at least 1 (got " + std::to_string(options.streams) + ")");
  if (options.depth < 1)
    throw std::invalid_argument("compute: depth must be at least 1 (got " + std::to_string(options.depth) + ")");
  if (options.convert) options.convert->validate();
  if (options.stream && options.streams != 1)
    throw std::invalid_argument("compute: a caller's stream (ComputeOptions::stream) needs streams = 1 (got " +
                                std::to_string(options.streams) + ")");
  return options;
}

}  // namespace

/// One compute stream and what belongs to it.
struct LaneState {
  std::mutex turn;  // held from start() to finish(): one batch enqueues at a time
  std::optional<Stream> stream;        // owned, or
  std::optional<StreamView> given;     // the caller's (ComputeOptions::stream)
  std::optional<EventWatcher> watcher;
  std::optional<StreamView> view() const {
    if (stream) return stream->view();
    return given;
  }
  DeviceBuffer converted;               // CUDA: the conversion's output, grown on first use
  std::vector<std::byte> host_converted;  // CPU device
  int outstanding = 0;                  // guarded by Impl::mutex
};

struct ComputeEngine::Impl {
  Device device;
  ComputeOptions options;
  std::vector<std::unique_ptr<LaneState>> lanes;
  mutable std::mutex mutex;  // outstanding counts, stats, next
  ComputeStats stats;
  int next = 0;  // round-robin among equally busy lanes

  /// The lane with the fewest batches outstanding (round-robin among ties); counts the new one.
  int pick() {
    std::lock_guard lock(mutex);
    const int count = static_cast<int>(lanes.size());
    int best = -1;
    for (int k = 0; k < count; ++k) {
      const int lane = (next + k) % count;
      if (best < 0 || lanes[lane]->outstanding < lanes[best]->outstanding) best = lane;
    }
    next = (best + 1) % count;
    ++lanes[best]->outstanding;
    return best;
  }

  void done(int lane, std::size_t items, std::chrono::duration<double, std::milli> time) {
    std::lock_guard lock(mutex);
    --lanes[lane]->outstanding;
    ++stats.batches;
    stats.items += items;
    stats.compute_time += time;
  }
};

ComputeEngine::ComputeEngine(Device device, ComputeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
  impl_->options = checked(std::move(options));
  impl_->stats.streams = impl_->options.streams;
  for (int k = 0; k < impl_->options.streams; ++k) {
    auto lane = std::make_unique<LaneState>();
    if (device.is_cuda()) {
      if (const auto& given = impl_->options.stream) {
        if (given->is_host() || given->device() != device)
          throw std::invalid_argument("compute: ComputeOptions::stream must be a CUDA stream of " + device.str());
        lane->given = *given;
      } else {
        lane->stream.emplace(device);
      }
      lane->watcher.emplace(device, "compute stream " + std::to_string(k));
    }
    impl_->lanes.push_back(std::move(lane));
  }
}

ComputeEngine::~ComputeEngine() {
  for (auto& lane : impl_->lanes) lane->watcher.reset();  // runs what is pending, with the lanes alive
}

ComputeEngine::Lane ComputeEngine::start(DeviceBatch& batch) {
  if (!batch.valid()) throw std::invalid_argument("compute: got an empty DeviceBatch (moved from or released)");
  if (batch.device() != impl_->device)
    throw std::invalid_argument("compute: got a batch on " + batch.device().str() + " but the stage computes on " +
                                impl_->device.str());
  const int index = impl_->pick();
  LaneState& state = *impl_->lanes[static_cast<std::size_t>(index)];
  state.turn.lock();
  Lane lane(this, index);  // from here on, an exception unlocks the lane and uncounts the batch

  const StreamView stream = this->stream(lane);
  if (!stream.is_host()) {
    stream.wait(*batch.ready());  // the GPU waits for the copy; the host does not
    batch.slot_->compute_start.record(stream);
  }
  if (const auto& convert = impl_->options.convert) {
    const TensorView raw = batch.pixels();
    if (!convertible(raw.dtype) || raw.layout != TensorLayout::nhwc)
      throw std::invalid_argument("compute: converting needs NHWC batches of u8, u16, i16 or f32 pixels, but this one "
                                  "is " + std::string(nodes::to_string(batch.shape().layout)) +
                                  " (drop the normalize transform, or do not ask the stage to convert)");
    // Sized for the shape's largest batch (variable-size batches are smaller): grown once, then reused.
    const std::size_t capacity_bytes =
        converted_bytes(batch.shape().batch_size, batch.shape().height, batch.shape().width, raw.c, convert->dtype);
    void* out = nullptr;
    if (stream.is_host()) {
      if (state.host_converted.size() < capacity_bytes) state.host_converted.resize(capacity_bytes);
      out = state.host_converted.data();
    } else {
      if (state.converted.size() < capacity_bytes) state.converted = DeviceBuffer(impl_->device, capacity_bytes);
      out = state.converted.data();
    }
    gpu::convert(raw.data, raw.dtype, out, raw.n, raw.h, raw.w, raw.c, *convert, stream);
    batch.set_input(TensorView{.data = out,
                               .dtype = convert->dtype,
                               .layout = convert->layout,
                               .n = raw.n,
                               .c = raw.c,
                               .h = raw.h,
                               .w = raw.w});
  }
  return lane;
}

StreamView ComputeEngine::stream(const Lane& lane) const noexcept {
  const auto& state = *impl_->lanes[static_cast<std::size_t>(lane.index())];
  return state.view().value_or(StreamView::host());
}

void ComputeEngine::finish(Lane lane, DeviceBatch batch, Callback then,
                           std::function<void(std::exception_ptr)> on_error) {
  const int index = lane.index();
  LaneState& state = *impl_->lanes[static_cast<std::size_t>(index)];
  const std::optional<StreamView> stream = state.view();
  if (!stream) {  // CPU: the work is done; its time came through add_cpu_time()
    lane.committed_ = true;
    {
      std::lock_guard lock(impl_->mutex);
      --state.outstanding;
    }
    batch.release();
    then();
    return;
  }
  DeviceSlot& slot = *batch.slot_;
  slot.compute_end.record(*stream);
  batch.computed_ = true;  // once compute_end has completed, so has the copy it waited for
  const std::size_t items = batch.size();
  const std::uint64_t sequence = batch.sequence();
  state.watcher->after(
      slot.compute_end,
      [this, index, items, sequence, &slot, batch = std::move(batch), then = std::move(then)]() mutable {
        std::chrono::duration<double, std::milli> time{0};
        try {
          time = Event::elapsed(slot.compute_start, slot.compute_end);
          if (const auto& timeline = impl_->options.timeline)
            timeline->add(GpuSpan::Kind::compute, sequence, index, slot.compute_start, slot.compute_end);
        } catch (...) {  // timing is best effort; the batch is done either way
        }
        impl_->done(index, items, time);
        batch.release();  // the GPU is done with the slot
        then();
      },
      [this, index, on_error = std::move(on_error)](std::exception_ptr error) {
        {
          std::lock_guard lock(impl_->mutex);
          --impl_->lanes[static_cast<std::size_t>(index)]->outstanding;
        }
        if (on_error) on_error(std::move(error));
      });
  lane.committed_ = true;
}

void ComputeEngine::unlock(int lane, bool committed) noexcept {
  LaneState& state = *impl_->lanes[static_cast<std::size_t>(lane)];
  if (!committed) {
    std::lock_guard lock(impl_->mutex);
    --state.outstanding;
  }
  state.turn.unlock();
}

void ComputeEngine::add_cpu_time(std::chrono::nanoseconds time, std::size_t items) noexcept {
  std::lock_guard lock(impl_->mutex);
  ++impl_->stats.batches;
  impl_->stats.items += items;
  impl_->stats.compute_time += time;
}

Device ComputeEngine::device() const noexcept { return impl_->device; }
const ComputeOptions& ComputeEngine::options() const noexcept { return impl_->options; }

ComputeStats ComputeEngine::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

}  // namespace stoke::gpu::detail
