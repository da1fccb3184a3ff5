// One pass of a dataset through the input pipeline, the to-device stage and a batch step on a
// backend (train, evaluate), with the pass's totals: the building block of fit() and evaluate(),
// and what `stoke bench train` measures.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <stoke/gpu/device_batch.hpp>
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

/// A batch's images {n, 3, size, size} f32 and labels {n} i32 on the backend's device: views of
/// the batch's memory (the host batch on the CPU, its device slot on a GPU), valid while it lives.
struct BatchTensors {
  nn::Tensor images;
  nn::Tensor labels;
  std::span<const std::uint64_t> indices;  ///< the items' dataset indices (host memory)
};
/// A host batch outside a pipeline (classify): views on the CPU; on a GPU, copies finished
/// before the call returns.
BatchTensors to_tensors(nodes::Batch& batch, nn::Backend& backend);
/// Views of `batch`; on a GPU the backend's stream is made to wait for the batch's copy first.
BatchTensors to_tensors(const gpu::DeviceBatch& batch, nn::Backend& backend);

/// What one pass over a dataset measured.
struct EpochTotals {
  double loss_sum = 0;  ///< sum over batches of mean loss x batch size
  std::int64_t correct = 0;
  std::int64_t correct_top5 = 0;  ///< filled by steps that report it (see BatchStep)
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

/// What a batch step gives back: the loss and correct count, and optionally the top-5 count
/// (-1: not computed).
struct StepResult {
  nn::LossResult loss;
  std::int64_t correct_top5 = -1;
};

/// One batch's work on the backend: Trainer::train_batch, Trainer::evaluate_batch, ...
using BatchStep = std::function<StepResult(const BatchTensors&)>;

/// Called from the compute stage about every 250 ms with the totals so far and the running
/// pipeline (Pipeline::stats() is safe from there).
using EpochProgress = std::function<void(const EpochTotals&, const graph::Pipeline&)>;

/// Called from the compute stage after each batch's step, with the batch and its loss stats read
/// on the host (the step's work is done): every stepped batch, a window's warmup ones included.
using BatchDone = std::function<void(const BatchTensors&, const nn::LossStats&)>;

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
  /// The sink stage's name: the autotuner's target when config.tuning.target names it, and the
  /// stage whose busy time is EpochTotals::compute_busy.
  std::string stage = "train";
  EpochProgress progress{};
  BatchDone after_batch{};
  MeasureWindow window{};
};

/// Runs `dataset` once through the input pipeline of `config` (batches in pinned memory on a GPU),
/// the to-device stage (copies on their own stream) and into `step`, in a sink stage named
/// options.stage. The callbacks run on the sink's thread, one call at a time, and must not block
/// for long: the pipeline waits for them. Ctrl-C under a graph::SignalStop stops the run: batches
/// arriving after the signal are not stepped (the step running finishes), and totals.stopped is
/// set. With config.trace_file, writes the run's Chrome trace there.
///
/// With a `window` (`stoke bench train`), the totals -- images, loss, seconds, compute_busy,
/// bottleneck -- are the window's; `report` stays the whole run's, and a window ended by its time
/// does not set `stopped`. With config.epochs == 0 the data repeats until the time is up.
EpochTotals run_epoch(const nodes::DatasetPtr& dataset, const InputConfig& config, nn::Backend& backend,
                      const BatchStep& step, const PassOptions& options = {});

/// Where a pipeline feeding a compute stage stands: that stage's busy time over `seconds`, and the
/// stage that limits throughput -- the compute stage while it is busy 90% of the time or more,
/// else the input stage that worked longest, the one keeping it waiting.
struct Limit {
  double compute_busy = 0;
  std::string stage;
};
Limit find_limit(const std::vector<graph::StageStats>& stages, const std::string& compute_stage, double seconds);

}  // namespace stoke::train
