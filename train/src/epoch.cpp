#include "stoke/train/epoch.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stoke/gpu/compute.hpp>
#include <stoke/gpu/pinned_allocator.hpp>
#include <stoke/gpu/staging.hpp>
#include <stoke/gpu/to_device.hpp>
#include <stoke/graph/signal.hpp>
#include <thread>
#include <utility>

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
          .raw = batch.pixels(),
          .epoch = batch.epoch()};
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

// Reads a batch's numbers back into `outcome` (its logits into `logits`), runs its on_result and
// adds it to `totals`.
void count(gpu::Computed<Readback>& done, EpochTotals& totals, bool add_to_totals) {
  Readback& r = done.value;
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
  if (!add_to_totals) return;
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
}

// Holds the batches of epochs after the open one in front of the compute stage (a serial async
// stage: while it holds one, the next wait in its queue), and tells the caller of run_epochs when
// an epoch is through: every batch it let through has been read back, and a batch of a later
// epoch is waiting (or the pipeline has ended).
class EpochGate {
 public:
  explicit EpochGate(std::uint32_t open) : open_(open) {}

  // The stage's body.
  void admit(gpu::DeviceBatch batch, graph::Completion<gpu::DeviceBatch> done) {
    {
      std::lock_guard lock(mutex_);
      if (!released_ && batch.epoch() > open_) {
        parked_.emplace(std::move(batch), std::move(done));
        changed_.notify_all();
        return;
      }
      ++admitted_[batch.epoch()];
    }
    done(std::move(batch));
  }
  // The results stage read a batch of `epoch` back.
  void finished(std::uint32_t epoch) {
    std::lock_guard lock(mutex_);
    ++finished_[epoch];
    changed_.notify_all();
  }
  // The pipeline's run returned (or threw).
  void ended() {
    std::lock_guard lock(mutex_);
    ended_ = true;
    changed_.notify_all();
  }
  // Waits until `epoch` is through; false when the pipeline ended before a later epoch's batch came.
  bool wait_through(std::uint32_t epoch) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return ended_ || (parked_ && finished_[epoch] == admitted_[epoch]); });
    return parked_.has_value();
  }
  // Lets the batches of `epoch` (and earlier) through.
  void open(std::uint32_t epoch) {
    let_through([&] { open_ = epoch; });
  }
  // Lets everything through from now on (the run is ending).
  void release() {
    let_through([&] { released_ = true; });
  }

 private:
  template <class Change>
  void let_through(Change change) {
    std::optional<std::pair<gpu::DeviceBatch, graph::Completion<gpu::DeviceBatch>>> go;
    {
      std::lock_guard lock(mutex_);
      change();
      if (parked_ && (released_ || parked_->first.epoch() <= open_)) {
        ++admitted_[parked_->first.epoch()];
        go = std::move(parked_);
        parked_.reset();
      }
    }
    if (go) go->second(std::move(go->first));
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::uint32_t open_;
  bool released_ = false;
  bool ended_ = false;
  std::optional<std::pair<gpu::DeviceBatch, graph::Completion<gpu::DeviceBatch>>> parked_;
  std::map<std::uint32_t, std::uint64_t> admitted_, finished_;
};

// What each stage did between two snapshots of a running pipeline's stats.
std::vector<graph::StageStats> stages_between(const std::vector<graph::StageStats>& before,
                                              std::vector<graph::StageStats> after) {
  for (std::size_t i = 0; i < after.size() && i < before.size(); ++i) {
    graph::StageStats& s = after[i];
    const graph::StageStats& b = before[i];
    s.items_in -= b.items_in;
    s.items_out -= b.items_out;
    s.dropped -= b.dropped;
    s.skipped -= b.skipped;
    s.busy -= b.busy;
    s.starved -= b.starved;
    s.blocked -= b.blocked;
  }
  return after;
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
  // What each stage did within the window.
  std::vector<graph::StageStats> stages(const graph::RunReport& report) const {
    return stages_between(at_start, done ? at_end : report.stages);
  }
};

using ComputeFn = std::function<Readback(gpu::DeviceBatch&, gpu::StreamView)>;

// The to-device stage's input queue: one batch waits in front of it (the copy engine keeps up).
constexpr std::size_t to_device_queue = 1;

// Host batches the stages after the batch stage hold besides the prefetch queue: the to-device
// stage one queued in front of it and one crossing, run_epochs's epoch gate one queued and one
// held. Throughput only: with fewer slots the batch stage parks more often (without a thread; it
// cannot deadlock), and the copies of the next batches would wait for the step.
constexpr std::size_t held_after_batching = to_device_queue + 1 + 2;

InputConfig path_config(const InputConfig& config, gpu::Device device) {
  InputConfig out = config;
  out.convert_on_device = true;
  if (!device.is_cpu()) out.allocator = gpu::batch_allocator(device);
  out.extra_slots += held_after_batching;
  return out;
}

// What the compute stage's callable reaches during one pass.
struct PassState {
  const BatchStep& step;
  WindowState& window;
  const std::function<bool()>& stop;               // PassOptions::stop
  std::atomic<bool> dropped_after_signal = false;  // a batch came after Ctrl-C and was not stepped
};

// Makes `state` the path's running pass for its lifetime; one at a time.
class ActivePass {
 public:
  ActivePass(PassState*& slot, PassState& state, const char* caller) : slot_(slot) {
    if (slot_) throw std::logic_error(std::string(caller) + ": a pass is running already (one at a time)");
    slot_ = &state;
  }
  ~ActivePass() { slot_ = nullptr; }
  ActivePass(const ActivePass&) = delete;
  ActivePass& operator=(const ActivePass&) = delete;

 private:
  PassState*& slot_;
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
    if (state.stop ? state.stop() : graph::SignalStop::received() > 0) {
      state.dropped_after_signal = true;
      return Readback{};
    }
    // No isolation needed here: the CPU backend isolates its own parallel loops, so this thread
    // never runs the pipeline's read/decode/batch tasks inside the step's time.
    return read_back(state.step(tensors_of(batch)), staging, on);
  }

  // The graph of a pass up to the compute stage: the input stages and the to-device stage, the
  // pass starting at `from`.
  graph::Flow<gpu::DeviceBatch> add_input_stages(graph::Pipeline& pipe, const InputConfig& pass_config) const {
    graph::StageOptions to_device_options = gpu::ToDevice::stage_options();
    to_device_options.capacity = to_device_queue;
    return add_input(pipe, input, pass_config).async<gpu::DeviceBatch>("to-device", to_device, to_device_options);
  }
  graph::StageOptions compute_options() const {
    return {.concurrency = graph::serial(), .ordered = true, .capacity = config.prefetch};
  }
  // The pass's config and pipeline options.
  InputConfig pass_config(const PassStart& from, std::uint32_t epochs) const {
    InputConfig out = config;
    out.epochs = epochs;
    out.first_epoch = from.epoch;
    out.start = from.skip;
    out.trace_file = from.trace_file;
    return out;
  }
  graph::PipelineOptions pipeline_options(const PassStart& from, const InputConfig& of_pass) const {
    graph::PipelineOptions out = input.pipeline_options;
    if (out.stall.limit.count() > 0 && !out.stall.item_name)
      out.stall.item_name = [this, of_pass](std::uint64_t index) { return item_file(input, of_pass, index); };
    out.trace = !from.trace_file.empty();
    out.stop_on_signal = true;  // Ctrl-C drains the pass (under a SignalStop)
    return out;
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
  const std::string& stage = options.stage;
  WindowState w{.window = options.window};
  PassState state{.step = step, .window = w, .stop = options.stop};
  const ActivePass active(impl_->pass, state, "ComputePath::run");

  const InputConfig config = impl_->pass_config(from, impl_->config.epochs);
  graph::Pipeline pipe(impl_->pipeline_options(from, config));

  EpochTotals totals;
  auto start = Clock::now();
  auto last_progress = start;
  impl_->add_input_stages(pipe, config)
      .async<gpu::Computed<Readback>>(stage, impl_->compute, impl_->compute_options())
      .sink(stage + "-results", [&](gpu::Computed<Readback> done) {
        // The device is done with the batch: its numbers are in host memory.
        if (!done.value.stepped || w.done) return;
        if (w.active && !w.open && w.warmup_seen == w.window.warmup_batches) w.begin(pipe, Clock::now());
        const bool warmup = w.active && !w.open;  // stepped, not counted
        count(done, totals, !warmup);
        if (warmup) {
          ++w.warmup_seen;
          return;
        }
        if (w.open) w.after_batch(pipe);
        if (options.progress && Clock::now() - last_progress > std::chrono::milliseconds(250)) {
          last_progress = Clock::now();
          totals.seconds = w.open ? w.seconds() : std::chrono::duration<double>(last_progress - start).count();
          totals.report.stages = pipe.stats();
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
  totals.bottleneck = network_or(limit.stage, report.stages, impl_->input.dataset->network());
  return totals;
}

graph::RunReport ComputePath::run_epochs(const BatchStep& step, const PassOptions& options, const PassStart& from,
                                         std::uint32_t epochs, const EpochEnd& at_end) {
  if (epochs == 0) throw std::invalid_argument("ComputePath::run_epochs: no epochs to run");
  const std::string& stage = options.stage;
  WindowState no_window{.window = {}};
  PassState state{.step = step, .window = no_window, .stop = options.stop};
  const ActivePass active(impl_->pass, state, "ComputePath::run_epochs");

  const InputConfig config = impl_->pass_config(from, epochs);
  graph::Pipeline pipe(impl_->pipeline_options(from, config));
  EpochGate gate(from.epoch);
  // The epoch being read back: written by the results stage, read by this thread once the gate
  // says the epoch is through (the gate's mutex orders the two).
  EpochTotals current;
  auto epoch_start = Clock::now();
  auto last_progress = epoch_start;
  std::vector<graph::StageStats> at_start;  // the stats when the epoch began
  impl_->add_input_stages(pipe, config)
      .async<gpu::DeviceBatch>("epoch-gate",
                               [&gate](gpu::DeviceBatch batch, graph::Completion<gpu::DeviceBatch> done) {
                                 gate.admit(std::move(batch), std::move(done));
                               },
                               {.concurrency = graph::serial(), .ordered = true, .capacity = 1})
      .async<gpu::Computed<Readback>>(stage, impl_->compute, impl_->compute_options())
      .sink(stage + "-results", [&](gpu::Computed<Readback> done) {
        if (done.value.stepped) count(done, current, true);
        const std::uint32_t epoch = done.epoch;
        if (options.progress && Clock::now() - last_progress > std::chrono::milliseconds(250)) {
          last_progress = Clock::now();
          current.seconds = std::chrono::duration<double>(last_progress - epoch_start).count();
          current.report.stages = stages_between(at_start, pipe.stats());  // this epoch's so far
          options.progress(current, pipe);
        }
        gate.finished(epoch);
      });

  graph::RunReport report;
  std::exception_ptr failure;
  at_start = pipe.stats();
  std::thread runner([&] {
    try {
      report = pipe.run();
    } catch (...) {
      failure = std::current_exception();
    }
    gate.ended();
  });
  // However this thread leaves, the pipeline ends first: cancelled, its held batch let through.
  struct Finish {
    graph::Pipeline& pipe;
    EpochGate& gate;
    std::thread& runner;
    void operator()(bool cancel) {
      if (!runner.joinable()) return;
      if (cancel) pipe.cancel();
      gate.release();
      runner.join();
    }
    ~Finish() { (*this)(true); }
  } finish{pipe, gate, runner};

  // Each epoch's own report: the stages' work between its start and its end, its skipped items
  // (by their stream position, whenever they were skipped).
  const std::size_t per_epoch = std::max<std::size_t>(1, impl_->input.order.per_epoch());
  const auto epoch_of = [&](std::uint64_t position) {
    return static_cast<std::uint32_t>(from.epoch + (position + from.skip) / per_epoch);
  };
  for (std::uint32_t epoch = from.epoch; epoch < from.epoch + epochs; ++epoch) {
    const bool went_on = gate.wait_through(epoch);
    if (!went_on) finish(false);  // the pipeline ended: its report is complete
    if (!went_on && failure) break;
    EpochTotals totals = std::exchange(current, EpochTotals{});
    totals.report = {};
    totals.seconds = std::chrono::duration<double>(Clock::now() - epoch_start).count();
    const std::vector<graph::StageStats> stats = pipe.stats();
    graph::RunReport& mine = totals.report;
    mine.stages = stages_between(at_start, stats);
    mine.elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(totals.seconds));
    for (graph::SkippedItem& item : went_on ? pipe.skipped_items() : report.skipped_items) {
      if (epoch_of(item.index) == epoch) mine.skipped_items.push_back(std::move(item));
    }
    for (const graph::StageStats& s : mine.stages) mine.skipped += s.skipped;
    totals.skipped = mine.skipped;
    totals.skipped_files = name_skips(mine, impl_->input, config);
    const Limit limit = find_limit(mine.stages, stage, totals.seconds);
    totals.compute_busy = limit.compute_busy;
    totals.bottleneck = network_or(limit.stage, mine.stages, impl_->input.dataset->network());
    // Cut by Ctrl-C: batches were dropped unstepped, or the source stopped before the epoch's end.
    totals.stopped = state.dropped_after_signal.exchange(false) ||
                     (!went_on && (epoch + 1 < from.epoch + epochs || report.stopped || report.cancelled));
    mine.stopped = totals.stopped;
    const bool more = at_end(epoch, totals);
    if (!more || totals.stopped || !went_on) break;
    at_start = stats;
    epoch_start = last_progress = Clock::now();
    gate.open(epoch + 1);
  }
  finish(true);
  if (failure) std::rethrow_exception(failure);
  if (!from.trace_file.empty()) pipe.write_trace(from.trace_file);
  return report;
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

namespace {

// How much a stage worked: its busy time, summed over its calls; for an async stage other than
// the compute (a read stage on threads of its own, many reads outstanding), the share of its
// slots in use: its busy time is that of every outstanding operation summed.
std::chrono::nanoseconds stage_load(const graph::StageStats& s) {
  return s.kind == graph::StageKind::async ? s.busy / std::max(1, s.concurrency) : s.busy;
}

}  // namespace

Limit find_limit(const std::vector<graph::StageStats>& stages, const std::string& compute_stage, double seconds) {
  Limit limit;
  std::chrono::nanoseconds busiest{0};
  for (const graph::StageStats& s : stages) {
    if (s.name == compute_stage) {
      // A share of the window: at most 1 (an operation that began before a measured window counts
      // whole, which can lift the sum a little past the window's length).
      limit.compute_busy = seconds > 0 ? std::min(1.0, std::chrono::duration<double>(s.busy).count() / seconds) : 0;
    } else if (const std::chrono::nanoseconds load = stage_load(s); load > busiest) {
      busiest = load;
      limit.stage = s.name;
    }
  }
  if (limit.compute_busy >= 0.9) limit.stage = compute_stage;
  return limit;
}

}  // namespace stoke::train
