// ToDevice: the host-to-device stage. Copies each host Batch into a device slot on a dedicated
// copy stream, records an event, and hands a DeviceBatch on at once: the compute stream waits on
// that event, never the host. The host batch's (pinned) slot goes back to its pool only when the
// copy is done, which an EventWatcher thread learns; no oneTBB worker waits on the GPU.
//
//   stoke::gpu::Device device = stoke::gpu::select_device("auto", &std::clog);
//   stoke::nodes::BatchPool pool(shape, 6, stoke::gpu::batch_allocator(device));   // pinned on a GPU
//   stoke::gpu::ToDevice to_device(device, pool.shape(), {.slots = pool.slots()});
//   flow.async<stoke::gpu::DeviceBatch>("to-device", to_device, stoke::gpu::ToDevice::stage_options())
//       .async<...>("compute", stoke::gpu::Compute(device, train_step), compute.stage_options())
//       ...
//
// Device memory is a fixed pool of `slots` batch buffers allocated up front (so the steady state
// allocates nothing); a slot comes back when its DeviceBatch is destroyed. When all are in use, a
// batch waits in the stage (its async operation stays outstanding) and the thread that frees a
// slot starts its copy: waiting never blocks a thread either. On the CPU device, the stage passes
// the host batch through as a DeviceBatch.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/device_batch.hpp"
#include "stoke/gpu/stream.hpp"
#include "stoke/gpu/timeline.hpp"
#include "stoke/graph/completion.hpp"
#include "stoke/graph/options.hpp"
#include "stoke/nodes/batch.hpp"

namespace stoke::gpu {

namespace detail {
class DeviceSlots;
}

struct ToDeviceOptions {
  /// Device batch buffers; size it like the host pool (its slots()).
  std::size_t slots = 4;
  /// Copy spans go here too when set (see timeline.hpp).
  std::shared_ptr<Timeline> timeline{};
};

struct TransferStats {
  std::uint64_t batches = 0;
  std::uint64_t bytes = 0;  ///< pixels and labels
  /// GPU time of the copies, from events around each (0 on the CPU device).
  std::chrono::duration<double, std::milli> copy_time{0};
  std::uint64_t slot_waits = 0;  ///< batches that found every device slot in use and waited
  std::size_t slots = 0;
  std::size_t peak_slots_in_use = 0;
  /// bytes / copy_time in GB/s (1e9 bytes), 0 without timing.
  double gigabytes_per_second() const noexcept {
    return copy_time.count() > 0 ? static_cast<double>(bytes) / (copy_time.count() * 1e6) : 0.0;
  }
};

/// An async-stage body (graph::Flow::async): Batch in, DeviceBatch out. A cheap handle: copies
/// share the streams, slots and stats. Thread-safe.
class ToDevice {
 public:
  /// Allocates the device slots for batches of `shape` and creates the copy stream. Throws
  /// DeviceError for a device that cannot be used, CudaOutOfMemory when the slots do not fit
  /// (naming the sizes).
  ToDevice(Device device, const nodes::BatchShape& shape, ToDeviceOptions options = {});

  /// Starts the copy of `batch` (or queues it for the next free slot) and resolves `done` with
  /// its DeviceBatch once the copy is enqueued. Throws std::invalid_argument when the batch's
  /// shape is not the one the stage was made for.
  void operator()(nodes::Batch batch, graph::Completion<DeviceBatch> done) const;

  /// Serial and ordered: batches cross in order, numbered by DeviceBatch::sequence(). The body
  /// only enqueues, so one call at a time keeps up with any copy engine.
  static graph::StageOptions stage_options() noexcept {
    return graph::StageOptions{.concurrency = graph::serial(), .ordered = true};
  }

  Device device() const noexcept;
  /// The copy stream (the host stream on the CPU device).
  StreamView stream() const noexcept;
  TransferStats stats() const;

 private:
  std::shared_ptr<detail::DeviceSlots> state_;
};

}  // namespace stoke::gpu
