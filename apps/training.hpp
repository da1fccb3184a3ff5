// What the training apps share (`stoke train`, `evaluate`, `classify`, `bench train`): the
// built-in dataset, batches as tensors on the compute device, one pass of a dataset through the
// input pipeline into a batch step, and the metadata a checkpoint carries for inference.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <stoke/gpu/dtype.hpp>
#include <stoke/gpu/nn/backend.hpp>
#include <stoke/gpu/nn/loss.hpp>
#include <stoke/gpu/nn/tensor.hpp>
#include <stoke/graph/pipeline.hpp>
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

/// A batch's images {n, 3, size, size} f32 and labels {n} i32 on the backend's device. On the CPU
/// they are views of the batch (valid while it lives); on a GPU, copies whose transfer is
/// finished before the batch goes back to its pool.
struct BatchTensors {
  gpu::nn::Tensor images;
  gpu::nn::Tensor labels;
};
BatchTensors to_tensors(nodes::Batch& batch, gpu::nn::Backend& backend);

/// What one pass over a dataset measured.
struct EpochTotals {
  double loss_sum = 0;  ///< sum over batches of mean loss x batch size
  std::int64_t correct = 0;
  std::int64_t correct_top5 = 0;  ///< filled by steps that report it (see BatchStep)
  std::int64_t images = 0;
  std::int64_t batches = 0;
  std::uint64_t skipped = 0;
  std::vector<graph::SkippedItem> skipped_items;  ///< the first ones, with the file and why
  double seconds = 0;
  double compute_busy = 0;  ///< the compute stage's busy time / wall time
  std::string bottleneck;   ///< the compute stage when >= 90% busy, else the busiest other stage
  bool stopped = false;     ///< ended early by Ctrl-C (or stop())
  graph::RunReport report;  ///< the pipeline's own report
};

/// What a batch step gives back: the loss and correct count, and optionally the top-5 count
/// (-1: not computed).
struct StepResult {
  gpu::nn::LossResult loss;
  std::int64_t correct_top5 = -1;
};

/// One batch's work on the backend: Trainer::train_batch, Trainer::evaluate_batch, ...
using BatchStep = std::function<StepResult(const BatchTensors&)>;

/// Called from the compute stage about every 250 ms with the totals so far and the running
/// pipeline (Pipeline::stats() is safe from there).
using EpochProgress = std::function<void(const EpochTotals&, const graph::Pipeline&)>;

/// Runs `dataset` once through the input pipeline of `config` into `step`, in a sink stage named
/// `stage` (the autotuner's target when config.tuning.target names it). Ctrl-C under a
/// graph::SignalStop drains the pipeline: totals.stopped is then set.
EpochTotals run_epoch(const nodes::DatasetPtr& dataset, const InputConfig& config, const std::string& stage,
                      gpu::nn::Backend& backend, const BatchStep& step, const EpochProgress& progress = {});

/// The image side a model trains at by default: 32 for small_cnn and mobilenet, 224 otherwise.
int default_image_size(const std::string& model);

/// "fp32" -> f32, "bf16" -> bf16, "fp16" -> f16; throws std::invalid_argument naming the choices.
gpu::DType compute_dtype(const std::string& precision);

/// How many of the rows of `logits` {N, classes} (any device, f32/bf16/f16) have their label among
/// the k largest logits. Waits for the backend's stream.
std::int64_t top_k_correct(const gpu::nn::Tensor& logits, const gpu::nn::Tensor& labels, int k,
                           gpu::nn::Backend& backend);

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

}  // namespace stoke::app
