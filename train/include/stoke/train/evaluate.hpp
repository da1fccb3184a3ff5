// Evaluation and prediction with a model restored from a checkpoint (load_for_inference): a
// labelled dataset's accuracy and confusion matrix, and the class probabilities of image files.
// Both go through the input pipeline with the checkpoint's evaluation transforms, so the images
// are prepared exactly as the validation images were during training.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "stoke/train/epoch.hpp"
#include "stoke/train/input.hpp"
#include "stoke/train/metrics.hpp"
#include "stoke/train/model_card.hpp"

namespace stoke::train {

/// Throws std::runtime_error unless `dataset`'s labels mean what the model's classes do: the
/// same class names in the same order (ImageFolder sorts its class folders by name, as training
/// saw them), or numbered labels "0", "1", ... (a file list) within the model's classes. The
/// message names `data` and `checkpoint` (paths, for the user) and the first difference.
void check_classes(const nodes::Dataset& dataset, const std::string& data, const ModelCard& card,
                   const std::string& checkpoint);

struct EvaluateOptions {
  std::size_t batch_size = 64;
  int threads = 0;  ///< input threads (0: the scheduler's choice)
  /// About every 250 ms, from the compute stage (see run_epoch).
  EpochProgress progress{};
};

/// What evaluate measured over the images it could read; all fractions are 0 when there were none.
struct Evaluation {
  double top1 = 0;  ///< 0..1: the confusion matrix's diagonal over the images
  double top5 = 0;
  double loss = 0;  ///< mean softmax cross-entropy
  std::int64_t images = 0;
  std::uint64_t skipped = 0;
  std::vector<SkippedFile> skipped_files{};  ///< the first ones, with the reason
  /// What the dataset left out when it opened (Dataset::ignored(), left_out_of): never read.
  LeftOut left_out{};
  ConfusionMatrix confusion{};               ///< rows: true class, columns: predicted
};

/// Runs every image of `dataset` once (no shuffling, the last partial batch kept) through the
/// input pipeline with model.card's image size and evaluation transforms, into the model in
/// Mode::eval on `backend` (the model's device); unreadable images are skipped and listed. Throws
/// std::runtime_error naming the file when an image's label is outside the model's classes.
/// Ctrl-C under a graph::SignalStop ends it early with the images seen so far. The model runs on
/// the pipeline's compute stage, one batch at a time: do not use it elsewhere meanwhile.
Evaluation evaluate(const InferenceModel& model, const nodes::DatasetPtr& dataset, nn::Backend& backend,
                    const EvaluateOptions& options = {});

/// One image file's prediction: the probability of each class (the card's order), or why the file
/// could not be classified.
struct FilePrediction {
  std::string file{};
  std::vector<float> probabilities{};  ///< softmax of the logits; empty when the file failed
  std::string error{};                 ///< why it failed (unreadable, not an image, ...); empty when not
  bool ok() const noexcept { return error.empty(); }
};

/// Classifies `files` (any order, duplicates allowed) in batches of up to `batch_size` through the
/// input pipeline with the card's evaluation transforms; the result is in the order of `files`. A
/// file that cannot be read or decoded gets its error, and the others are still classified. As
/// evaluate, it uses the model on the pipeline's compute stage until it returns.
std::vector<FilePrediction> classify_files(const InferenceModel& model, const std::vector<std::string>& files,
                                           nn::Backend& backend, std::size_t batch_size = 64);

}  // namespace stoke::train
