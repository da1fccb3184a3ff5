#include "stoke/gpu/to_device.hpp"

#include <algorithm>
#include <iostream>
#include <stdexcept>
#include <string>
#include <utility>

#include "device_slots.hpp"
#include "stoke/gpu/error.hpp"
#include "internal.hpp"

namespace stoke::gpu {

namespace detail {

namespace {
constexpr std::size_t field_alignment = 256;  // cudaMalloc's own alignment

/// Bytes of a host batch's fields that cross to the device: all but the indices (and names).
std::size_t crossing_bytes(const nodes::Batch& batch) {
  std::size_t bytes = batch.data().size() + batch.mask().size() + batch.labels().size_bytes();
  for (std::size_t k = 0; k < batch.shape().targets.size(); ++k) bytes += batch.target(k).size_bytes();
  bytes += batch.boxes().size_bytes() + batch.box_classes().size_bytes() + batch.box_extras().size_bytes() +
           batch.box_counts().size_bytes() + batch.item_sizes().size_bytes();
  return bytes;
}

void check_shape(const nodes::Batch& batch, const nodes::BatchShape& expected) {
  if (!batch.valid()) throw std::invalid_argument("to-device: got an empty Batch (moved from or released)");
  if (batch.shape() != expected)
    throw std::invalid_argument("to-device: got a batch of " + batch.shape().describe() + " but the stage was made for " +
                                expected.describe() + "; build ToDevice from the batch pool's shape()");
}
}  // namespace

DeviceSlot::DeviceSlot(Device device, std::size_t id_in, const nodes::BatchBlock& layout)
    : id(id_in),
      block(device, layout.bytes),
      copy_start(device, {.timing = true, .blocking_sync = false}),
      copy_end(device, {.timing = true, .blocking_sync = true}),
      compute_start(device, {.timing = true, .blocking_sync = false}),
      compute_end(device, {.timing = true, .blocking_sync = true}) {
  std::byte* base = block.as<std::byte>();
  data = base + layout.pixels;
  mask = base + layout.mask;
  labels = reinterpret_cast<std::int32_t*>(base + layout.labels);
  for (std::size_t offset : layout.targets) targets.push_back(reinterpret_cast<float*>(base + offset));
  boxes = reinterpret_cast<float*>(base + layout.boxes);
  box_classes = reinterpret_cast<std::int32_t*>(base + layout.box_classes);
  box_extras = reinterpret_cast<float*>(base + layout.box_extras);
  box_counts = reinterpret_cast<std::int32_t*>(base + layout.box_counts);
  item_sizes = reinterpret_cast<std::int32_t*>(base + layout.item_sizes);
}

DeviceSlots::DeviceSlots(Device device, const nodes::BatchShape& shape, ToDeviceOptions options)
    : device_(device), shape_(shape), timeline_(std::move(options.timeline)) {
  shape_.validate();
  if (options.slots == 0) throw std::invalid_argument("to-device: slots must be at least 1");
  stats_.slots = options.slots;
  if (device_.is_cpu()) return;  // batches pass through; nothing to allocate
  stream_.emplace(device_, StreamPriority::high);  // compute waits on copies: let them go first
  slots_.reserve(options.slots);
  const nodes::BatchBlock layout = nodes::block_layout(shape_, field_alignment);
  try {
    for (std::size_t i = 0; i < options.slots; ++i) slots_.push_back(std::make_unique<DeviceSlot>(device_, i, layout));
  } catch (const CudaOutOfMemory& oom) {
    const std::size_t per_slot = layout.bytes;
    throw CudaOutOfMemory(oom.library(), oom.code(), oom.code_name(), oom.text(), oom.call(), oom.file(), oom.line(),
                          "to-device: " + std::to_string(options.slots) + " device slots of " + shape_.describe() +
                              " (" + format_bytes(per_slot) + " each) do not fit on " + device_.str() +
                              "; reduce the batch size or the prefetch depth");
  }
  free_.reserve(slots_.size());
  for (auto it = slots_.rbegin(); it != slots_.rend(); ++it) free_.push_back(it->get());
  watcher_.emplace(device_, "to-device copies");
}

DeviceSlots::~DeviceSlots() {
  watcher_.reset();  // runs the callbacks still pending while everything they touch exists
}

void DeviceSlots::submit(nodes::Batch batch, graph::Completion<DeviceBatch> done) {
  check_shape(batch, shape_);
  if (device_.is_cpu()) {
    DeviceBatch out(std::move(batch));
    {
      std::lock_guard lock(mutex_);
      out.sequence_ = next_sequence_++;
      ++stats_.batches;
      stats_.bytes += crossing_bytes(out.host_);
    }
    done(std::move(out));
    return;
  }
  DeviceSlot* slot = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (device_failure_) std::rethrow_exception(device_failure_);
    if (waiting_.empty() && !free_.empty()) {
      slot = free_.back();
      free_.pop_back();
      stats_.peak_slots_in_use = std::max(stats_.peak_slots_in_use, slots_.size() - free_.size());
    } else {
      ++stats_.slot_waits;
      waiting_.push_back(Waiting{std::move(batch), std::move(done)});
      return;
    }
  }
  start_copy(*slot, Waiting{std::move(batch), std::move(done)});
}

void DeviceSlots::release(DeviceSlot& slot, bool copy_complete) noexcept {
  nodes::Batch host;
  std::optional<Waiting> next;
  {
    std::lock_guard lock(mutex_);
    if (copy_complete) host = std::move(slot.host);
    next = drop_hold_locked(slot);
  }
  host.release();
  reuse(slot, std::move(next));
}

std::optional<DeviceSlots::Waiting> DeviceSlots::drop_hold_locked(DeviceSlot& slot) {
  if (--slot.holds > 0) return std::nullopt;
  if (waiting_.empty()) {
    free_.push_back(&slot);
    return std::nullopt;
  }
  std::optional<Waiting> next(std::move(waiting_.front()));
  waiting_.pop_front();
  return next;
}

void DeviceSlots::reuse(DeviceSlot& slot, std::optional<Waiting> next) noexcept {
  if (next) start_copy(slot, std::move(*next));
}

void DeviceSlots::start_copy(DeviceSlot& slot, Waiting waiting) noexcept {
  try {
    DeviceGuard guard(device_);
    nodes::Batch& host = waiting.batch;
    const StreamView copy = stream_->view();
    slot.copy_start.record(copy);
    copy_async(slot.data, host.data().data(), host.data().size(), copy);
    if (host.has_mask()) copy_async(slot.mask, host.mask().data(), host.mask().size(), copy);
    copy_async(slot.labels, host.labels().data(), host.labels().size_bytes(), copy);
    for (std::size_t k = 0; k < slot.targets.size(); ++k)
      copy_async(slot.targets[k], host.target(k).data(), host.target(k).size_bytes(), copy);
    if (host.has_boxes()) {
      copy_async(slot.boxes, host.boxes().data(), host.boxes().size_bytes(), copy);
      copy_async(slot.box_classes, host.box_classes().data(), host.box_classes().size_bytes(), copy);
      if (!host.box_extras().empty())
        copy_async(slot.box_extras, host.box_extras().data(), host.box_extras().size_bytes(), copy);
      copy_async(slot.box_counts, host.box_counts().data(), host.box_counts().size_bytes(), copy);
    }
    if (!host.item_sizes().empty())
      copy_async(slot.item_sizes, host.item_sizes().data(), host.item_sizes().size_bytes(), copy);
    slot.copy_end.record(copy);

    DeviceBatch out;
    out.device_ = device_;
    out.take_metadata(waiting.batch);
    out.data_ = slot.data;
    out.device_labels_ = slot.labels;
    out.mask_ = slot.mask;
    out.targets_.assign(slot.targets.begin(), slot.targets.end());
    if (host.has_boxes()) out.boxes_ = {slot.boxes, slot.box_classes, slot.box_extras, slot.box_counts};
    if (host.shape().variable_size) out.device_item_sizes_ = slot.item_sizes;
    out.input_ = out.pixels();
    std::uint64_t sequence = 0;
    {
      std::lock_guard lock(mutex_);
      sequence = next_sequence_++;
      ++stats_.batches;
      stats_.bytes += crossing_bytes(host);
      slot.host = std::move(host);  // back to its pool once the copy has read it
      slot.holds = 2;
    }
    out.sequence_ = sequence;
    out.slots_ = shared_from_this();  // from here on, the batch holds the slot (one of its 2 holds)
    out.slot_ = &slot;
    watcher_->after(
        slot.copy_end, [this, &slot, sequence] { copy_done(slot, sequence); },
        [this, &slot](std::exception_ptr error) {
          {
            std::lock_guard lock(mutex_);
            if (!device_failure_) device_failure_ = error;
          }
          copy_done(slot, std::uint64_t(-1));
        });
    waiting.done(std::move(out));
  } catch (...) {
    // Nothing was handed on: the slot is free again, the host batch goes back with `waiting`.
    std::optional<Waiting> next;
    {
      std::lock_guard lock(mutex_);
      slot.host.release();
      slot.holds = 1;
      next = drop_hold_locked(slot);
    }
    waiting.done.fail(std::current_exception());
    reuse(slot, std::move(next));
  }
}

void DeviceSlots::copy_done(DeviceSlot& slot, std::uint64_t sequence) noexcept {
  std::chrono::duration<double, std::milli> time{0};
  if (sequence != std::uint64_t(-1)) {
    try {
      time = Event::elapsed(slot.copy_start, slot.copy_end);
      if (timeline_) timeline_->add(GpuSpan::Kind::copy, sequence, 0, slot.copy_start, slot.copy_end);
    } catch (const std::exception& error) {
      std::cerr << "stoke: to-device: could not time copy " << sequence << ": " << error.what() << '\n';
    }
  }
  nodes::Batch host;
  std::optional<Waiting> next;
  {
    std::lock_guard lock(mutex_);
    stats_.copy_time += time;
    host = std::move(slot.host);
    next = drop_hold_locked(slot);
  }
  host.release();
  reuse(slot, std::move(next));
}

TransferStats DeviceSlots::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace detail

ToDevice::ToDevice(Device device, const nodes::BatchShape& shape, ToDeviceOptions options)
    : state_(std::make_shared<detail::DeviceSlots>(device, shape, std::move(options))) {}

void ToDevice::operator()(nodes::Batch batch, graph::Completion<DeviceBatch> done) const {
  state_->submit(std::move(batch), std::move(done));
}

Device ToDevice::device() const noexcept { return state_->device(); }
StreamView ToDevice::stream() const noexcept { return state_->stream(); }
TransferStats ToDevice::stats() const { return state_->stats(); }

}  // namespace stoke::gpu
