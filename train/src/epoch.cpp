#include "stoke/train/epoch.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <stoke/gpu/compute.hpp>
#include <stoke/gpu/pinned_allocator.hpp>
#include <stoke/gpu/staging.hpp>
#include <stoke/gpu/to_device.hpp>
#include <stoke/graph/signal.hpp>

#include "stoke/train/metrics.hpp"

namespace stoke::train {

using Clock = std::chrono::steady_clock;

namespace {

// The step's view of a batch the compute stage has converted (DeviceBatch::input()).
BatchTensors tensors_of(const gpu::DeviceBatch& batch) {
  const gpu::TensorView& x = batch.input();
  const auto n = static_cast<std::int64_t>(batch.size());
  // The labels are only read; the view's pointer is not const because a Tensor may be written.
  return {.images = nn::Tensor::view_of(x.data, {n, x.c, x.h, x.w}, x.dtype, batch.device(), x.layout),
          .labels = nn::Tensor::view_of(const_cast<std::int32_t*>(batch.device_labels()), {n}, gpu::DType::i32,
                                        batch.device()),
          .indices = batch.indices(),
          .raw = batch.pixels()};
}

// What the compute stage hands on for a batch: its numbers, being copied to host memory on the
// step's stream; the results stage reads them once the device is done with the batch.
struct Readback {
  bool stepped = false;  // false: the batch came after Ctrl-C or after the window's end
  gpu::Staged stats;     // {mean loss, correct} f32, when the step returned a loss
  std::int64_t count = 0;
  gpu::Staged logits;  // {n, classes} in logits_dtype, when the step returned logits
  nn::Shape logits_shape;
  gpu::DType logits_dtype = gpu::DType::f32;
  // The step's device tensors, alive until the copies out of them are done.
  nn::LossResult loss;
  nn::Tensor logits_on_device;
  std::function<void(const StepOutcome&)> on_result;
};

Readback read_back(StepResult r, gpu::StagingPool& staging, gpu::StreamView stream) {
  Readback out;
  out.stepped = true;
  if (r.loss.stats.defined()) {
    out.stats = staging.copy(r.loss.stats.data(), r.loss.stats.bytes(), stream);
    out.count = r.loss.count;
  }
  if (r.logits.defined()) {
    out.logits = staging.copy(r.logits.data(), r.logits.bytes(), stream);
    out.logits_shape = r.logits.shape();
    out.logits_dtype = r.logits.dtype();
  }
  out.loss = std::move(r.loss);
  out.logits_on_device = std::move(r.logits);
  out.on_result = std::move(r.on_result);
  return out;
}

// A MeasureWindow's bookkeeping in run_epoch's results stage (serial: one call at a time).
struct WindowState {
  MeasureWindow window;
  bool active = window.warmup_batches > 0 || window.seconds > 0;
  std::int64_t warmup_seen = 0;
  bool open = false;
  std::atomic<bool> done = false;  // the time is up: the pipeline is cancelled, nothing more is stepped
  Clock::time_point start{}, end{};
  std::vector<graph::StageStats> at_start{}, at_end{};

  double seconds() const { return open ? std::chrono::duration<double>(end - start).count() : 0; }
  void begin(const graph::Pipeline& pipe, Clock::time_point now) {
    open = true;
    start = end = now;
    at_start = pipe.stats();
  }
  void after_batch(graph::Pipeline& pipe) {
    end = Clock::now();
    if (window.seconds > 0 && seconds() >= window.seconds) {
      at_end = pipe.stats();
      done = true;
      pipe.cancel();  // what is still queued would not be counted: drop it rather than drain it
    }
  }
  // Each stage's busy time within the window.
  std::vector<graph::StageStats> stages(const graph::RunReport& report) const {
    std::vector<graph::StageStats> out = done ? at_end : report.stages;
    for (graph::StageStats& s : out) {
      for (const graph::StageStats& b : at_start) {
        if (b.name == s.name) s.busy -= b.busy;
      }
    }
    return out;
  }
};

using ComputeFn = std::function<Readback(gpu::DeviceBatch&, gpu::StreamView)>;

// The to-device stage holds up to two host batches: one queued in front of it, one crossing.
// Without those two slots the batch stage could wait for a slot inside a oneTBB task that the
// train step's own parallel loops stole -- on the thread whose step would free the slot.
constexpr std::size_t to_device_queue = 1;

InputConfig path_config(const InputConfig& config, gpu::Device device) {
  InputConfig out = config;
  out.convert_on_device = true;
  if (!device.is_cpu()) out.allocator = gpu::batch_allocator(device);
  out.extra_slots += to_device_queue + 1;
  return out;
}

// What the compute stage's callable reaches during one pass.
struct PassState {
  const BatchStep& step;
  WindowState& window;
  std::atomic<bool> dropped_after_signal = false;  // a batch came after Ctrl-C and was not stepped
};

}  // namespace

struct ComputePath::Impl {
  Impl(const nodes::DatasetPtr& dataset, const InputConfig& given, gpu::Device device_in, gpu::StreamView stream_in)
      : config(path_config(given, device_in)),
        input(make_input(dataset, config)),
        device(device_in),
        // The device slots: as many as the host pool has, so that to-device never holds a batch
        // back that the pool could give. On the CPU device the stage passes host batches through.
        to_device(device, input.pool.shape(), {.slots = input.pool.slots(), .timeline = {}}),
        staging(device),
        // The compute stage: one batch at a time, in order (training is a sequence of steps), on
        // the backend's stream, converting the uint8 batch first.
        compute(device, ComputeFn([this](gpu::DeviceBatch& batch, gpu::StreamView on) { return step(batch, on); }),
                {.streams = 1,
                 .depth = 1,
                 .convert = input.convert,
                 .timeline = {},
                 .stream = device.is_cuda() ? std::optional<gpu::StreamView>(stream_in) : std::nullopt}) {}

  Readback step(gpu::DeviceBatch& batch, gpu::StreamView on) {
    PassState& state = *pass;
    // After Ctrl-C the pipeline drains what is in flight; those batches are not trained on, so
    // that the checkpoint is written right after the current step.
    if (state.window.done) return Readback{};
    if (graph::SignalStop::received() > 0) {
      state.dropped_after_signal = true;
      return Readback{};
    }
    // No isolation needed here: the CPU backend isolates its own parallel loops, so this thread
    // never runs the pipeline's read/decode/batch tasks inside the step's time.
    return read_back(state.step(tensors_of(batch)), staging, on);
  }

  InputConfig config;
  Input input;
  gpu::Device device;
  gpu::ToDevice to_device;
  gpu::StagingPool staging;
  gpu::Compute<ComputeFn> compute;
  PassState* pass = nullptr;  // set while run() runs a pass
};

ComputePath::ComputePath(const nodes::DatasetPtr& dataset, const InputConfig& config, gpu::Device device,
                         gpu::StreamView stream)
    : impl_(std::make_unique<Impl>(dataset, config, device, stream)) {}

ComputePath::ComputePath(const nodes::DatasetPtr& dataset, const InputConfig& config, nn::Backend& backend)
    : ComputePath(dataset, config, backend.device(), backend.stream()) {}

ComputePath::~ComputePath() = default;

EpochTotals ComputePath::run(const BatchStep& step, const PassOptions& options, const PassStart& from) {
  if (impl_->pass) throw std::logic_error("ComputePath::run: a pass is running already (one at a time)");
  const std::string& stage = options.stage;
  WindowState w{.window = options.window};
  PassState state{.step = step, .window = w};
  impl_->pass = &state;
  struct Unset {
    PassState*& pass;
    ~Unset() { pass = nullptr; }
  } unset{impl_->pass};

  InputConfig config = impl_->config;
  config.first_epoch = from.epoch;
  config.start = from.skip;
  config.trace_file = from.trace_file;
  graph::PipelineOptions pipeline_options = impl_->input.pipeline_options;
  pipeline_options.trace = !from.trace_file.empty();
  pipeline_options.stop_on_signal = true;  // Ctrl-C drains the pass (under a SignalStop)
  graph::Pipeline pipe(pipeline_options);
  graph::StageOptions to_device_options = gpu::ToDevice::stage_options();
  to_device_options.capacity = to_device_queue;

  EpochTotals totals;
  auto start = Clock::now();
  auto last_progress = start;
  add_input(pipe, impl_->input, config)
      .async<gpu::DeviceBatch>("to-device", impl_->to_device, to_device_options)
      .async<gpu::Computed<Readback>>(
          stage, impl_->compute,
          {.concurrency = graph::serial(), .ordered = true, .capacity = impl_->config.prefetch})
      .sink(stage + "-results", [&](gpu::Computed<Readback> done) {
        // The device is done with the batch: its numbers are in host memory.
        Readback& r = done.value;
        if (!r.stepped || w.done) return;
        if (w.active && !w.open && w.warmup_seen == w.window.warmup_batches) w.begin(pipe, Clock::now());
        StepOutcome outcome{.labels = done.labels, .indices = done.indices};
        if (!r.stats.empty()) {
          const auto values = r.stats.as<float>();
          outcome.loss = nn::LossStats{.loss = values[0], .correct = std::llround(values[1]), .count = r.count};
        }
        std::vector<float> logits;
        if (!r.logits.empty()) {
          logits = nn::Tensor::view_of(r.logits.data(), r.logits_shape, r.logits_dtype).to_vector();
          outcome.logits = logits;
          outcome.classes = static_cast<std::size_t>(r.logits_shape.back());
        }
        if (r.on_result) r.on_result(outcome);
        if (w.active && !w.open) {  // a warmup batch: stepped, not counted
          ++w.warmup_seen;
          return;
        }
        const auto n = static_cast<std::int64_t>(outcome.size());
        if (outcome.loss) {
          totals.loss_sum += outcome.loss->loss * static_cast<double>(n);
          totals.correct += outcome.loss->correct;
        }
        if (!logits.empty()) {
          for (std::size_t i = 0; i < outcome.size(); ++i)
            totals.correct_top5 += in_top_k(outcome.row(i), outcome.labels[i], 5) ? 1 : 0;
        }
        totals.images += n;
        ++totals.batches;
        if (w.open) w.after_batch(pipe);
        if (options.progress && Clock::now() - last_progress > std::chrono::milliseconds(250)) {
          last_progress = Clock::now();
          totals.seconds = w.open ? w.seconds() : std::chrono::duration<double>(last_progress - start).count();
          options.progress(totals, pipe);
        }
      });
  start = Clock::now();
  totals.report = pipe.run();
  const graph::RunReport& report = totals.report;
  totals.seconds = std::chrono::duration<double>(report.elapsed).count();
  totals.skipped = report.skipped;
  totals.skipped_files = name_skips(report, impl_->input, config);
  if (!from.trace_file.empty()) pipe.write_trace(from.trace_file);
  // A signal that came after the source had emitted everything does not cut the pipeline short,
  // but the batches the compute stage dropped were not trained on all the same.
  totals.stopped = ((report.stopped || report.cancelled) && !w.done) || state.dropped_after_signal;
  if (w.active) totals.seconds = w.seconds();
  const Limit limit = find_limit(w.active ? w.stages(report) : report.stages, stage, totals.seconds);
  totals.compute_busy = limit.compute_busy;
  totals.bottleneck = limit.stage;
  return totals;
}

EpochTotals run_epoch(const nodes::DatasetPtr& dataset, const InputConfig& config, nn::Backend& backend,
                      const BatchStep& step, const PassOptions& options) {
  return run_epoch(dataset, config, backend.device(), backend.stream(), step, options);
}

EpochTotals run_epoch(const nodes::DatasetPtr& dataset, const InputConfig& config, gpu::Device device,
                      gpu::StreamView stream, const BatchStep& step, const PassOptions& options) {
  return ComputePath(dataset, config, device, stream)
      .run(step, options, {.epoch = config.first_epoch, .skip = config.start, .trace_file = config.trace_file});
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
