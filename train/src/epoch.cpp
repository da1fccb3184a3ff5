#include "stoke/train/epoch.hpp"

#include <chrono>
#include <stdexcept>
#include <stoke/gpu/event.hpp>
#include <stoke/gpu/pinned_allocator.hpp>
#include <stoke/gpu/to_device.hpp>
#include <stoke/graph/signal.hpp>

namespace stoke::train {

using Clock = std::chrono::steady_clock;

BatchTensors to_tensors(nodes::Batch& batch, nn::Backend& backend) {
  const auto n = static_cast<std::int64_t>(batch.size());
  const auto side = static_cast<std::int64_t>(batch.shape().height);
  nn::Tensor images = nn::Tensor::view_of(batch.f32().data(), {n, 3, side, side}, gpu::DType::f32);
  nn::Tensor labels = nn::Tensor::view_of(batch.labels().data(), {n}, gpu::DType::i32);
  if (backend.device().is_cpu()) return {images, labels, batch.indices()};
  BatchTensors out{images.to(backend.device(), backend.stream()), labels.to(backend.device(), backend.stream()),
                   batch.indices()};
  backend.stream().synchronize();
  return out;
}

BatchTensors to_tensors(const gpu::DeviceBatch& batch, nn::Backend& backend) {
  const gpu::TensorView pixels = batch.pixels();
  if (pixels.dtype != gpu::DType::f32 || pixels.layout != gpu::TensorLayout::nchw) {
    throw std::invalid_argument("the model takes normalized float images: end the transforms with normalize");
  }
  const auto n = static_cast<std::int64_t>(batch.size());
  nn::Tensor images =
      nn::Tensor::view_of(pixels.data, {n, pixels.c, pixels.h, pixels.w}, gpu::DType::f32, batch.device());
  // The labels are only read; the view's pointer is not const because a Tensor may be written.
  nn::Tensor labels =
      nn::Tensor::view_of(const_cast<std::int32_t*>(batch.device_labels()), {n}, gpu::DType::i32, batch.device());
  // The copy was enqueued on the to-device stage's stream: the compute stream waits for its event.
  if (const gpu::Event* ready = batch.ready()) backend.stream().wait(*ready);
  return {images, labels, batch.indices()};
}

namespace {

// A MeasureWindow's bookkeeping in run_epoch's sink (serial: one call at a time).
struct WindowState {
  MeasureWindow window;
  bool active = window.warmup_batches > 0 || window.seconds > 0;
  std::int64_t warmup_seen = 0;
  bool open = false;
  bool done = false;  // the time is up: the pipeline is cancelled
  Clock::time_point start{}, end{};
  std::chrono::nanoseconds step_busy{0};  // the sink's own time in the window's batches
  std::vector<graph::StageStats> at_start{}, at_end{};

  double seconds() const { return open ? std::chrono::duration<double>(end - start).count() : 0; }
  void begin(const graph::Pipeline& pipe, Clock::time_point now) {
    open = true;
    start = end = now;
    at_start = pipe.stats();
  }
  void after_batch(graph::Pipeline& pipe, Clock::time_point call_start) {
    end = Clock::now();
    step_busy += end - call_start;
    if (window.seconds > 0 && seconds() >= window.seconds) {
      at_end = pipe.stats();
      done = true;
      pipe.cancel();  // what is still queued would not be counted: drop it rather than drain it
    }
  }
  // Each stage's busy time within the window; the sink's is its own measure, since a snapshot
  // taken inside a call does not yet hold that call's time.
  std::vector<graph::StageStats> stages(const graph::RunReport& report, const std::string& sink) const {
    std::vector<graph::StageStats> out = done ? at_end : report.stages;
    for (graph::StageStats& s : out) {
      for (const graph::StageStats& b : at_start) {
        if (b.name == s.name) s.busy -= b.busy;
      }
      if (s.name == sink) s.busy = step_busy;
    }
    return out;
  }
};

}  // namespace

EpochTotals run_epoch(const nodes::DatasetPtr& dataset, const InputConfig& config, nn::Backend& backend,
                      const BatchStep& step, const PassOptions& options) {
  const std::string& stage = options.stage;
  WindowState w{.window = options.window};
  InputConfig pinned = config;
  if (!backend.device().is_cpu()) pinned.allocator = gpu::batch_allocator(backend.device());
  // The to-device stage holds up to two host batches: one queued in front of it, one crossing.
  // Without those two slots the batch stage could wait for a slot inside a oneTBB task that the
  // train step's own parallel loops stole -- on the thread whose step would free the slot.
  constexpr std::size_t to_device_queue = 1;
  pinned.extra_slots += to_device_queue + 1;
  Input input = make_input(dataset, pinned);
  input.pipeline_options.stop_on_signal = true;  // Ctrl-C drains the epoch (under a SignalStop)
  graph::Pipeline pipe(input.pipeline_options);
  // The device slots: as many as the host pool has, so that to-device never holds a batch back
  // that the pool could give. On the CPU device the stage passes host batches through.
  const gpu::ToDevice to_device(backend.device(), input.pool.shape(), {.slots = input.pool.slots(), .timeline = {}});
  graph::StageOptions to_device_options = gpu::ToDevice::stage_options();
  to_device_options.capacity = to_device_queue;
  EpochTotals totals;
  bool dropped_after_signal = false;  // a batch came after Ctrl-C and was not stepped
  auto start = Clock::now();
  auto last_progress = start;
  add_input(pipe, input, pinned)
      .async<gpu::DeviceBatch>("to-device", to_device, to_device_options)
      .sink(stage,
            [&](gpu::DeviceBatch batch) {
              // After Ctrl-C the pipeline drains what is in flight; those batches are not
              // trained on, so that the checkpoint is written right after the current step.
              if (w.done) return;
              if (graph::SignalStop::received() > 0) {
                dropped_after_signal = true;
                return;
              }
              const auto call_start = Clock::now();
              if (w.active && !w.open && w.warmup_seen == w.window.warmup_batches) w.begin(pipe, call_start);
              const BatchTensors t = to_tensors(batch, backend);
              // No isolation needed here: the CPU backend isolates its own parallel loops, so this
              // thread never runs the pipeline's read/decode/batch tasks inside the step's time.
              const StepResult r = step(t);
              // Reading the stats waits for the step's work on the stream: the batch's device
              // slot is free to go back when this call returns.
              const nn::LossStats s = r.loss.read(backend.stream());
              if (options.after_batch) options.after_batch(t, s);
              if (w.active && !w.open) {  // a warmup batch: stepped, not counted
                ++w.warmup_seen;
                return;
              }
              const std::int64_t n = t.labels.numel();
              totals.loss_sum += s.loss * static_cast<double>(n);
              totals.correct += s.correct;
              if (r.correct_top5 >= 0) totals.correct_top5 += r.correct_top5;
              totals.images += n;
              ++totals.batches;
              if (w.open) w.after_batch(pipe, call_start);
              if (options.progress && Clock::now() - last_progress > std::chrono::milliseconds(250)) {
                last_progress = Clock::now();
                totals.seconds = w.open ? w.seconds() : std::chrono::duration<double>(last_progress - start).count();
                options.progress(totals, pipe);
              }
            },
            {.capacity = config.prefetch});
  start = Clock::now();
  totals.report = pipe.run();
  const graph::RunReport& report = totals.report;
  totals.seconds = std::chrono::duration<double>(report.elapsed).count();
  totals.skipped = report.skipped;
  totals.skipped_files = name_skips(report, input, pinned);
  if (!config.trace_file.empty()) pipe.write_trace(config.trace_file);
  // A signal that came after the source had emitted everything does not cut the pipeline short,
  // but the batches the sink dropped were not trained on all the same.
  totals.stopped = ((report.stopped || report.cancelled) && !w.done) || dropped_after_signal;
  if (w.active) totals.seconds = w.seconds();
  const Limit limit = find_limit(w.active ? w.stages(report, stage) : report.stages, stage, totals.seconds);
  totals.compute_busy = limit.compute_busy;
  totals.bottleneck = limit.stage;
  return totals;
}

Limit find_limit(const std::vector<graph::StageStats>& stages, const std::string& compute_stage, double seconds) {
  Limit limit;
  std::chrono::nanoseconds busiest{0};
  for (const graph::StageStats& s : stages) {
    if (s.name == compute_stage) {
      limit.compute_busy = seconds > 0 ? std::chrono::duration<double>(s.busy).count() / seconds : 0;
    } else if (s.busy > busiest) {
      busiest = s.busy;
      limit.stage = s.name;
    }
  }
  if (limit.compute_busy >= 0.9) limit.stage = compute_stage;
  return limit;
}

}  // namespace stoke::train
