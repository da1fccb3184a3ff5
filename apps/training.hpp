// What the training apps share (`stoke train`, `evaluate`, `classify`, `bench train`): the
// built-in dataset, batches as tensors on the compute device, one pass of a dataset through the
// input pipeline into a batch step, and the metadata a checkpoint carries for inference.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <span>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/device_batch.hpp>
#include <stoke/gpu/dtype.hpp>
#include <stoke/gpu/stream.hpp>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/loss.hpp>
#include <stoke/nn/tensor.hpp>
#include <stoke/nodes/batch.hpp>
#include <stoke/nodes/dataset.hpp>
#include <string>
#include <vector>

#include "input_pipeline.hpp"

namespace stoke::app {

/// $STOKE_CACHE, else $XDG_CACHE_HOME/stoke, else ~/.cache/stoke, else ./.stoke-cache.
std::filesystem::path cache_folder();

/// The built-in shapes dataset (10 classes at 32 px, 5000 training and 200 validation images per
/// class) under cache_folder(), written on first use (progress on stderr unless `quiet`). Returns
/// its root, holding train/ and val/.
std::filesystem::path builtin_dataset(bool quiet);

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

/// A steady-state measurement for run_epoch: the first `warmup_batches` batches go through the
/// step uncounted (first allocations, queues filling, the scheduler's first moves), then batches
/// are counted until `seconds` have passed (0: to the end of the data), when the pipeline is
/// cancelled. The default, {0, 0}, counts the whole run.
struct MeasureWindow {
  std::int64_t warmup_batches = 0;
  double seconds = 0;
};

/// Runs `dataset` once through the input pipeline of `config` (batches in pinned memory on a GPU),
/// the to-device stage (copies on their own stream) and into `step`, in a sink stage named
/// `stage` (the autotuner's target when config.tuning.target names it). Ctrl-C under a
/// graph::SignalStop stops the run: batches arriving after the signal are not stepped (the step
/// running finishes), and totals.stopped is set. With config.trace_file, writes the run's Chrome
/// trace there.
///
/// With a `window` (`stoke bench train`), the totals -- images, loss, seconds, compute_busy,
/// bottleneck -- are the window's; `report` stays the whole run's, and a window ended by its time
/// does not set `stopped`. With config.epochs == 0 the data repeats until the time is up.
EpochTotals run_epoch(const nodes::DatasetPtr& dataset, const InputConfig& config, const std::string& stage,
                      nn::Backend& backend, const BatchStep& step, const EpochProgress& progress = {},
                      const MeasureWindow& window = {});

/// Where a pipeline feeding a compute stage stands: that stage's busy time over `seconds`, and the
/// stage that limits throughput -- the compute stage while it is busy 90% of the time or more,
/// else the input stage that worked longest, the one keeping it waiting.
struct Limit {
  double compute_busy = 0;
  std::string stage;
};
Limit find_limit(const std::vector<graph::StageStats>& stages, const std::string& compute_stage, double seconds);

/// The image side a model trains at by default: 32 for small_cnn and mobilenet, 224 otherwise.
int default_image_size(const std::string& model);

/// The training augmentation when none is given, at `size`: for photos random crops
/// (random_resized_crop scale=0.35:1), flip, normalize; for the built-in shapes dataset
/// (`builtin`), whose images are already framed at their size and whose label a crop could cut
/// off, resize + center_crop, flip, normalize.
std::vector<std::string> default_train_transforms(int size, bool builtin);

/// "fp32" -> f32, "bf16" -> bf16, "fp16" -> f16; throws std::invalid_argument naming the choices.
gpu::DType compute_dtype(const std::string& precision);

/// A batch's logits {N, classes} and labels {N} copied to the host, for metrics.
struct HostScores {
  std::vector<float> scores;  ///< row-major, N x classes
  std::vector<std::int32_t> labels;
  std::size_t classes = 0;
  std::span<const float> row(std::size_t i) const { return {scores.data() + i * classes, classes}; }
};
/// Copies them (any device, f32/bf16/f16 logits); waits for the backend's stream.
HostScores to_host(const nn::Tensor& logits, const nn::Tensor& labels, nn::Backend& backend);

/// Whether `label` is among the k largest of `row`: fewer than k classes score strictly higher
/// (ties favour the label, as with the loss's top-1 count).
bool in_top_k(std::span<const float> row, std::int32_t label, int k);

/// How many of the rows of `logits` {N, classes} (any device, f32/bf16/f16) have their label among
/// the k largest logits. Waits for the backend's stream.
std::int64_t top_k_correct(const nn::Tensor& logits, const nn::Tensor& labels, int k, nn::Backend& backend);

/// Checkpoint metadata for inference (Trainer::set_metadata): the model's name, its image size,
/// the class names and the evaluation transforms.
struct ModelCard {
  std::string model;
  int image_size = 0;
  std::vector<std::string> classes;
  std::vector<std::string> eval_transforms;
};
std::map<std::string, std::string> to_metadata(const ModelCard& card);
/// Throws std::runtime_error naming `source` (the checkpoint) when an entry is missing.
ModelCard model_card_from(const std::map<std::string, std::string>& metadata, const std::string& source);

/// Where a command computes: the device, a stream on it (CUDA only) and the backend using it.
struct Compute {
  gpu::Device device = gpu::Device::cpu();
  std::unique_ptr<gpu::Stream> stream;  ///< null on the CPU; outlives the backend
  std::unique_ptr<nn::Backend> backend;
};
/// The device `spec` names ("auto", "cpu", "cuda:N"; see gpu::select_device, which logs the choice
/// to `log` when not null) and a backend on it.
Compute make_compute(const std::string& spec, std::ostream* log);

/// A model restored from a `stoke train` checkpoint for inference: the card, and the model with
/// the checkpoint's weights on the backend's device.
struct InferenceModel {
  ModelCard card;
  std::unique_ptr<nn::Sequential> model;
};
/// Reads the card from the checkpoint's header, builds the model it names with its classes on
/// `backend`'s device and loads the weights. Throws std::runtime_error naming the file when it
/// cannot be read, is not a (complete) safetensors file, has no card (not written by `stoke
/// train`), or its weights do not fit the model the card names.
InferenceModel load_for_inference(const std::filesystem::path& checkpoint, nn::Backend& backend);

}  // namespace stoke::app
