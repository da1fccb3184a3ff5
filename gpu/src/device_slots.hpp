// DeviceSlots: the to-device stage's state (private header). Device batch buffers allocated up
// front, the copy stream and its watcher, batches waiting for a slot, and the transfer stats.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "stoke/gpu/device_batch.hpp"
#include "stoke/gpu/event.hpp"
#include "stoke/gpu/event_watcher.hpp"
#include "stoke/gpu/memory.hpp"
#include "stoke/gpu/stream.hpp"
#include "stoke/gpu/to_device.hpp"

namespace stoke::gpu::detail {

/// One device batch buffer and the events that order its use: the copy's start and end (the end
/// is DeviceBatch::ready()), and the compute stage's start and end.
struct DeviceSlot {
  /// Its block holds every field the host batches carry but the indices, laid out by `layout`.
  DeviceSlot(Device device, std::size_t id, const nodes::BatchBlock& layout);

  std::size_t id;
  DeviceBuffer block;
  std::byte* data = nullptr;
  std::byte* mask = nullptr;
  std::int32_t* labels = nullptr;
  std::vector<float*> targets;
  float* boxes = nullptr;
  std::int32_t* box_classes = nullptr;
  float* box_extras = nullptr;
  std::int32_t* box_counts = nullptr;
  std::int32_t* item_sizes = nullptr;
  Event copy_start;
  Event copy_end;
  Event compute_start;
  Event compute_end;
  // Guarded by DeviceSlots::mutex_:
  nodes::Batch host;  // the host batch being copied, until the copy is known to be done
  int holds = 0;      // 2 from the copy's start: its DeviceBatch, and the copy watcher's callback
};

class DeviceSlots : public std::enable_shared_from_this<DeviceSlots> {
 public:
  DeviceSlots(Device device, const nodes::BatchShape& shape, ToDeviceOptions options);
  ~DeviceSlots();
  DeviceSlots(const DeviceSlots&) = delete;
  DeviceSlots& operator=(const DeviceSlots&) = delete;

  /// The stage body: copy now if a slot is free, else queue behind the batches already waiting.
  void submit(nodes::Batch batch, graph::Completion<DeviceBatch> done);
  /// A DeviceBatch gives its slot back. `copy_complete`: work ordered after the copy has finished
  /// (it was computed), so the host batch can go back to its pool now. The slot is free once the
  /// copy watcher has also seen the copy end; it then starts the oldest waiting copy, if any.
  void release(DeviceSlot& slot, bool copy_complete) noexcept;

  Device device() const noexcept { return device_; }
  StreamView stream() const noexcept { return stream_ ? stream_->view() : StreamView::host(); }
  TransferStats stats() const;

 private:
  struct Waiting {
    nodes::Batch batch;
    graph::Completion<DeviceBatch> done;
  };
  /// Enqueues the copy into `slot` and resolves the item's Completion (with the DeviceBatch, or
  /// with the error, giving the slot back).
  void start_copy(DeviceSlot& slot, Waiting waiting) noexcept;
  void copy_done(DeviceSlot& slot, std::uint64_t sequence) noexcept;
  /// Drops one of the slot's holds (locked); at zero, the slot is free or goes to a waiting batch.
  std::optional<Waiting> drop_hold_locked(DeviceSlot& slot);
  void reuse(DeviceSlot& slot, std::optional<Waiting> next) noexcept;

  Device device_;
  nodes::BatchShape shape_;
  std::shared_ptr<Timeline> timeline_;
  std::optional<Stream> stream_;
  std::vector<std::unique_ptr<DeviceSlot>> slots_;
  std::optional<EventWatcher> watcher_;  // last: joined first, while the slots still exist

  mutable std::mutex mutex_;
  std::vector<DeviceSlot*> free_;
  std::deque<Waiting> waiting_;
  std::uint64_t next_sequence_ = 0;
  std::exception_ptr device_failure_;  // a copy that could not be waited for
  // stats (under mutex_)
  TransferStats stats_;
};

}  // namespace stoke::gpu::detail
