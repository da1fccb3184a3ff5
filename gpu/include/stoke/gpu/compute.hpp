// Compute: the stage where batches meet the model. Runs a user callable
// `R(DeviceBatch&, StreamView)` that enqueues its work on the given stream and returns at once;
// the stage records an event after it and resolves the item when the GPU is done, handing on
// Computed<R> (the batch's metadata and the callable's R) and giving the device slot back.
//
//   stoke::gpu::Compute compute(device, [&](stoke::gpu::DeviceBatch& batch, stoke::gpu::StreamView stream) {
//     model.train_step(batch.input(), batch.device_labels(), stream);   // enqueue only
//     return loss_slot;                                                // read once resolved
//   }, {.streams = 1, .convert = stoke::gpu::ConvertOptions{}});
//   flow.async<stoke::gpu::Computed<LossSlot>>("compute", compute, compute.stage_options())
//       .sink("log", ...);
//
// - Streams: K compute streams (ComputeOptions::streams), batches dealt round-robin; each stream
//   waits on its batch's copy event (cudaStreamWaitEvent) before the callable's work. Or the
//   caller's stream (ComputeOptions::stream), e.g. an nn backend's.
// - Errors: a callable that throws has its stream synchronized before the batch's device slot
//   goes back, so that no work still queued reads a slot that the next batch overwrites.
// - Convert: with ComputeOptions::convert, uint8 NHWC batches are converted on the compute stream
//   (convert.hpp) into a per-stream buffer before the callable runs; DeviceBatch::input() views it.
// - Depth: each stream holds up to `depth` batches enqueued at once, so the GPU has the next batch
//   queued when it finishes one; the stage's concurrency is streams x depth.
// - The CPU device runs the callable synchronously with the host stream on host batches, with
//   the same conversion done on the CPU, so every pipeline runs without a GPU.
// - R must be movable; a callable returning void gives Computed<std::monostate>.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "stoke/gpu/callback.hpp"
#include "stoke/gpu/convert.hpp"
#include "stoke/gpu/device.hpp"
#include "stoke/gpu/device_batch.hpp"
#include "stoke/gpu/stream.hpp"
#include "stoke/gpu/timeline.hpp"
#include "stoke/graph/completion.hpp"
#include "stoke/graph/options.hpp"

namespace stoke::gpu {

struct ComputeOptions {
  int streams = 1;  ///< K compute streams (>= 1)
  int depth = 2;    ///< batches enqueued per stream at once (>= 1)
  /// Convert uint8 NHWC batches on the device before the callable (float/bf16, NCHW/NHWC).
  std::optional<ConvertOptions> convert{};
  /// Compute spans go here too when set (see timeline.hpp).
  std::shared_ptr<Timeline> timeline{};
  /// Compute on this CUDA stream of the device (the nn backend's, whose work the callable
  /// enqueues) instead of creating `streams` of its own; needs streams == 1. Unset: own streams.
  std::optional<StreamView> stream{};
};

struct ComputeStats {
  std::uint64_t batches = 0;
  std::uint64_t items = 0;
  /// GPU time between each batch's start (after its copy) and the end of its work, from events;
  /// on the CPU device, the callable's wall time.
  std::chrono::duration<double, std::milli> compute_time{0};
  int streams = 0;
};

/// What the compute stage hands on once a batch's work is done.
template <class R>
struct Computed {
  std::uint64_t sequence = 0;  ///< DeviceBatch::sequence()
  std::uint32_t epoch = 0;
  std::vector<std::int32_t> labels;
  std::vector<std::uint64_t> indices;
  R value{};
  std::size_t size() const noexcept { return labels.size(); }
};

namespace detail {

/// The part of the stage that is not templated on the callable: streams, watchers, conversion
/// buffers, events, stats.
class ComputeEngine {
 public:
  ComputeEngine(Device device, ComputeOptions options);
  ~ComputeEngine();
  ComputeEngine(const ComputeEngine&) = delete;
  ComputeEngine& operator=(const ComputeEngine&) = delete;

  /// A batch's turn on one stream (a "lane"): from start() to finish() the lane is locked, so the
  /// work of two batches enqueued from two threads never interleaves on one stream. Move-only;
  /// destroying an unfinished one (the callable threw) unlocks the lane.
  class Lane {
   public:
    Lane(Lane&& other) noexcept
        : engine_(std::exchange(other.engine_, nullptr)), index_(other.index_), committed_(other.committed_) {}
    Lane& operator=(Lane&&) = delete;
    Lane(const Lane&) = delete;
    Lane& operator=(const Lane&) = delete;
    ~Lane() {
      if (engine_) engine_->unlock(index_, committed_);
    }
    int index() const noexcept { return index_; }

   private:
    friend class ComputeEngine;
    Lane(ComputeEngine* engine, int index) noexcept : engine_(engine), index_(index) {}
    ComputeEngine* engine_;
    int index_;
    bool committed_ = false;  // finish() handed the batch on: it stays outstanding until done
  };

  /// Picks the least busy stream and locks it, makes it wait for the batch's copy, records the
  /// start, converts (setting batch.input()).
  Lane start(DeviceBatch& batch);
  StreamView stream(const Lane& lane) const noexcept;
  /// After the callable enqueued its work: records the end and, once the GPU is done, gives the
  /// batch's slot back and runs `then` (on the lane's watcher thread; at once on the CPU device);
  /// `on_error` gets a failure to wait. Takes the batch, so that nothing else can move it out
  /// while finish() still reads it. Unlocks the lane.
  void finish(Lane lane, DeviceBatch batch, Callback then, std::function<void(std::exception_ptr)> on_error);
  /// On the CPU device, the callable's wall time is added here.
  void add_cpu_time(std::chrono::nanoseconds time, std::size_t items) noexcept;

  Device device() const noexcept;
  const ComputeOptions& options() const noexcept;
  ComputeStats stats() const;

 private:
  void unlock(int lane, bool committed) noexcept;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

template <class R>
using stored_result_t = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

}  // namespace detail

/// An async-stage body: DeviceBatch in, Computed<R> out, where R is what `fn` returns. A cheap
/// handle: copies share the streams and stats. `fn` may be called from several threads at once
/// when streams x depth > 1 (each call with its own batch and stream).
template <class F>
class Compute {
 public:
  using Result = detail::stored_result_t<std::invoke_result_t<F&, DeviceBatch&, StreamView>>;
  using Output = Computed<Result>;

  /// Throws std::invalid_argument for streams or depth < 1, DeviceError for an unusable device.
  Compute(Device device, F fn, ComputeOptions options = {})
      : engine_(std::make_shared<detail::ComputeEngine>(device, std::move(options))),
        fn_(std::make_shared<F>(std::move(fn))) {}

  void operator()(DeviceBatch batch, graph::Completion<Output> done) const {
    DeviceGuard current(engine_->device());  // the callable's kernels launch on this device
    detail::ComputeEngine::Lane lane = engine_->start(batch);
    const StreamView stream = engine_->stream(lane);
    const auto begin = std::chrono::steady_clock::now();
    Output out{batch.sequence(), batch.epoch(), {}, {}, call_or_sync(batch, stream)};
    if (stream.is_host()) engine_->add_cpu_time(std::chrono::steady_clock::now() - begin, batch.size());
    out.labels.assign(batch.labels().begin(), batch.labels().end());
    out.indices.assign(batch.indices().begin(), batch.indices().end());
    auto shared_done = std::make_shared<graph::Completion<Output>>(std::move(done));
    engine_->finish(
        std::move(lane), std::move(batch),
        [out = std::move(out), shared_done]() mutable { (*shared_done)(std::move(out)); },
        [shared_done](std::exception_ptr error) { shared_done->fail(std::move(error)); });
  }

  /// Async, streams x depth operations outstanding, ordered.
  graph::StageOptions stage_options() const noexcept {
    const auto& o = engine_->options();
    return graph::StageOptions{.concurrency = graph::parallel(o.streams * o.depth), .ordered = true};
  }
  Device device() const noexcept { return engine_->device(); }
  ComputeStats stats() const { return engine_->stats(); }

 private:
  // A callable that throws may have enqueued work that still reads the batch: the stream
  // finishes it before the batch's slot can go back (the only wait, and only on this error path).
  Result call_or_sync(DeviceBatch& batch, StreamView stream) const {
    try {
      return call(batch, stream);
    } catch (...) {
      if (!stream.is_host()) stream.synchronize();
      throw;
    }
  }

  Result call(DeviceBatch& batch, StreamView stream) const {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, DeviceBatch&, StreamView>>) {
      (*fn_)(batch, stream);
      return {};
    } else {
      return (*fn_)(batch, stream);
    }
  }

  std::shared_ptr<detail::ComputeEngine> engine_;
  std::shared_ptr<F> fn_;
};

}  // namespace stoke::gpu
