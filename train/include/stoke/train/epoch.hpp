// One pass of a dataset through the input pipeline, the to-device stage and a batch step on a
// backend (train, evaluate, classify), with the pass's totals: the building block of fit() and evaluate(),
// and what `stoke bench train` measures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/device_batch.hpp>
#include <stoke/gpu/dtype.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/loss.hpp>
#include <stoke/nn/tensor.hpp>
#include <stoke/nodes/batch.hpp>
#include <stoke/nodes/dataset.hpp>
#include <string>
#include <vector>

#include "stoke/train/input.hpp"

namespace stoke::train {

/// A batch as the step sees it, on the backend's device: `images` {n, c, size, size} f32, the
/// pixels converted and normalized by the compute stage (on the device; on the CPU device, in the
/// step's own stage), `labels` {n} i32, and `raw` the pixels as they crossed from the host (uint8
/// NHWC). Views of the compute stage's memory, valid during the step.
struct BatchTensors {
  nn::Tensor images;
  nn::Tensor labels;
  std::span<const std::uint64_t> indices;  ///< the items' dataset indices (host memory)
  gpu::TensorView raw{};
  std::uint32_t epoch = 0;  ///< the epoch the batch's items belong to
};

/// What one pass over a dataset measured.
struct EpochTotals {
  double loss_sum = 0;  ///< sum over batches of mean loss x batch size
  std::int64_t correct = 0;
  std::int64_t correct_top5 = 0;  ///< counted when the step returns logits (see StepResult)
  std::int64_t images = 0;
  std::int64_t batches = 0;
  std::uint64_t skipped = 0;
  std::vector<SkippedFile> skipped_files;  ///< the first ones, with the file and why
  double seconds = 0;
  double compute_busy = 0;  ///< the compute stage's busy time / wall time
  std::string bottleneck;   ///< the compute stage when >= 90% busy, else the busiest other stage
  bool stopped = false;     ///< ended early by Ctrl-C (or stop())
  graph::RunReport report;  ///< the pipeline's own report
};

/// A batch's numbers on the host, once its step is done on the device: what StepResult asked to
/// read back, with the batch's labels and dataset indices.
struct StepOutcome {
  std::optional<nn::LossStats> loss{};  ///< when the step returned a loss
  std::span<const float> logits{};      ///< {n, classes} row-major, when the step returned logits
  std::size_t classes = 0;
  std::span<const std::int32_t> labels{};
  std::span<const std::uint64_t> indices{};
  std::size_t size() const noexcept { return labels.size(); }
  std::span<const float> row(std::size_t i) const noexcept { return logits.subspan(i * classes, classes); }
};

/// What a batch step gives back: tensors on the device, which the pass copies to the host on the
/// step's stream and reads once the device is done with the batch -- a step late, never waiting.
struct StepResult {
  nn::LossResult loss{};  ///< the loss and correct count (undefined stats: no loss, e.g. prediction)
  nn::Tensor logits{};    ///< {n, classes}, when the caller wants them (top-5 is counted from them)
  /// Runs on the results stage, in batch order, with the numbers read back: per-batch bookkeeping
  /// (a confusion matrix, predictions, a step log). Must be quick.
  std::function<void(const StepOutcome&)> on_result{};
};

/// One batch's work on the backend: Trainer::train_batch, Trainer::evaluate_batch, ... It runs in
/// the compute stage, one batch at a time and in the batches' order, and must only enqueue work on
/// the backend's stream (reading a result there would make a pipeline thread wait for the GPU).
using BatchStep = std::function<StepResult(const BatchTensors&)>;

/// Called from the results stage about every 250 ms with the totals so far -- totals.report.stages
/// holding the stages' work in this pass (in ComputePath::run_epochs: in this epoch) -- and the
/// running pipeline (Pipeline::stats() is safe from there; its figures count from its start).
using EpochProgress = std::function<void(const EpochTotals&, const graph::Pipeline&)>;

/// A steady-state measurement for run_epoch: the first `warmup_batches` batches go through the
/// step uncounted (first allocations, queues filling, the scheduler's first moves), then batches
/// are counted until `seconds` have passed (0: to the end of the data), when the pipeline is
/// cancelled. The default, {0, 0}, counts the whole run.
struct MeasureWindow {
  std::int64_t warmup_batches = 0;
  double seconds = 0;
};

/// How run_epoch runs a pass besides its input and its step.
struct PassOptions {
  /// The compute stage's name: the autotuner's target when config.tuning.target names it, and the
  /// stage whose busy time is EpochTotals::compute_busy. The results stage after it is named
  /// `stage` + " results".
  std::string stage = "train";
  EpochProgress progress{};
  MeasureWindow window{};
  /// Asked by the compute stage before each batch: true ends the pass there (that batch and those
  /// after it are not stepped, and totals.stopped is set). Empty: a Ctrl-C received under a
  /// graph::SignalStop. A data-parallel run gives a stop the ranks agree on, so that they all stop
  /// at the same step.
  std::function<bool()> stop{};
};

/// Runs `dataset` once through one compute path, the same on every device:
///
///   source -> read -> decode (+augment) -> batch -> to-device -> `stage` -> `stage` results
///
/// The host batches hold the decoded pixels as they are (uint8 NHWC, in pinned memory on a GPU):
/// a trailing normalize transform is not run on the CPU but by the compute stage (gpu::Compute's
/// convert, with the transform's mean and stddev; without one, the pixels are scaled to 0..1), on
/// the device after the copy, or inside the step's stage on the CPU device. The compute stage
/// calls `step` one batch at a time, in order, on the backend's stream, enqueues the copies of its
/// loss and logits to the host, and hands the batch on when the device is done with it (an event,
/// not a wait); the results stage then reads those numbers, counts them, calls
/// StepResult::on_result and `options.progress`. No pipeline thread waits for the GPU. A step that
/// throws has its stream synchronized before the batch's device slot is reused.
///
/// Ctrl-C under a graph::SignalStop stops the run: batches arriving after the signal are not
/// stepped (the step running finishes), and totals.stopped is set. With config.trace_file, writes
/// the run's Chrome trace there. The callbacks run one call at a time.
///
/// With a `window` (`stoke bench train`), the totals -- images, loss, seconds, compute_busy,
/// bottleneck -- are the window's; `report` stays the whole run's, and a window ended by its time
/// does not set `stopped`. With config.epochs == 0 the data repeats until the time is up.
EpochTotals run_epoch(const nodes::DatasetPtr& dataset, const InputConfig& config, nn::Backend& backend,
                      const BatchStep& step, const PassOptions& options = {});
/// The same pass where the step is not an nn backend's: computing on `device`, on `stream` (a
/// CUDA stream of the device; the host stream on the CPU). Both build a ComputePath for the pass
/// (starting at config.first_epoch, config.start items in, traced to config.trace_file).
EpochTotals run_epoch(const nodes::DatasetPtr& dataset, const InputConfig& config, gpu::Device device,
                      gpu::StreamView stream, const BatchStep& step, const PassOptions& options = {});

/// Where a pass of a ComputePath starts: the epoch (its order and draws come from (seed, epoch,
/// item)), the items of that epoch's order to pass over (a resumed run), and where to write the
/// pass's Chrome trace (empty: none).
struct PassStart {
  std::uint32_t epoch = 0;
  std::size_t skip = 0;
  std::filesystem::path trace_file{};
};

/// run_epoch's pipeline around what outlives a pass: the host batch pool (pinned on a GPU), the
/// to-device stage's device slots, the compute stage's streams and conversion buffer, the staging
/// buffers. A run keeps one per dataset and runs every pass through it, so that no epoch (and no
/// validation) allocates pinned or device memory again. The InputConfig's epochs count per pass.
/// One pass at a time.
class ComputePath {
 public:
  ComputePath(const nodes::DatasetPtr& dataset, const InputConfig& config, gpu::Device device,
              gpu::StreamView stream);
  ComputePath(const nodes::DatasetPtr& dataset, const InputConfig& config, nn::Backend& backend);
  ~ComputePath();
  ComputePath(const ComputePath&) = delete;
  ComputePath& operator=(const ComputePath&) = delete;

  /// One pass, as run_epoch describes, from `start`. Throws std::logic_error when called while
  /// another pass runs.
  EpochTotals run(const BatchStep& step, const PassOptions& options = {}, const PassStart& start = {});

  /// Called by run_epochs, on its caller's thread, when an epoch's last batch has been read back:
  /// the epoch and its totals (report and skipped_files stay empty: they are the run's). The
  /// compute stage holds the next epoch's batches until it returns, so the model does not move
  /// meanwhile -- validate, checkpoint, report here -- while the input stages go on preparing them
  /// within their bounds. Return false to end the run after this epoch.
  using EpochEnd = std::function<bool(std::uint32_t epoch, EpochTotals& totals)>;

  /// `epochs` epochs from `start` through one pipeline that lives for all of them (not a pipeline
  /// per epoch), each epoch's batches stepped only after the previous epoch's `at_end` returned.
  /// The pipeline runs on a thread of its own; this thread waits for the epochs' ends. An epoch
  /// cut by Ctrl-C (graph::SignalStop) has totals.stopped set and ends the run. Returns the
  /// pipeline's report; rethrows what the pipeline or `at_end` threw, after the pipeline ended.
  /// options.window is not supported here (run() has it).
  graph::RunReport run_epochs(const BatchStep& step, const PassOptions& options, const PassStart& start,
                              std::uint32_t epochs, const EpochEnd& at_end);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Where a pipeline feeding a compute stage stands: that stage's busy time over `seconds`, and the
/// stage that limits throughput -- the compute stage while it is busy 90% of the time or more,
/// else the input stage that worked longest, the one keeping it waiting.
struct Limit {
  double compute_busy = 0;
  std::string stage;
};
Limit find_limit(const std::vector<graph::StageStats>& stages, const std::string& compute_stage, double seconds);

}  // namespace stoke::train
