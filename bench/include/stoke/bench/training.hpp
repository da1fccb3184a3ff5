// The share of the training step's speed the whole pipeline delivers (`stoke bench train`): the
// step on a synthetic batch already on the device (the compute bound) alternated with the step
// fed by the pipeline on real files, round after round, and their medians.
#pragma once

#include <cstdint>
#include <functional>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/trainer.hpp>
#include <stoke/nodes/dataset.hpp>
#include <stoke/train/epoch.hpp>
#include <stoke/train/input.hpp>
#include <string>
#include <vector>

namespace stoke::bench {

/// One round: the compute bound, then the pipeline.
struct TrainingRound {
  double compute = 0;   ///< images/s of the step on the synthetic batch
  double pipeline = 0;  ///< images/s of the step fed by the pipeline
  double compute_busy = 0;  ///< the train step's busy share in the pipeline run, 0..1
  std::string bottleneck;   ///< the stage that limited the pipeline run
  double ratio() const noexcept { return compute > 0 ? pipeline / compute : 0; }
};

struct TrainingBenchResult {
  std::vector<TrainingRound> rounds;
  double compute_bound = 0;  ///< the median of the rounds' compute bounds
  double pipeline = 0;       ///< the median of their pipeline rates
  double compute_busy = 0;   ///< the median busy share
  /// The bottleneck of the middle round by pipeline rate (the upper middle for an even count).
  std::string bottleneck;
  double ratio() const noexcept { return compute_bound > 0 ? pipeline / compute_bound : 0; }
};

struct TrainingBenchOptions {
  int repeats = 1;        ///< rounds
  int warmup = 10;        ///< batches first in each measurement, not counted
  double seconds = 10;    ///< counted seconds of each measurement
  std::uint64_t seed = 0;  ///< round r starts at epoch r of the seed's orders
  /// Called as a round goes: before the compute bound ("compute", round so far), before the
  /// pipeline ("pipeline") and when the round is done ("done").
  std::function<void(int round, const char* phase, const TrainingRound& so_far)> progress{};
};

/// Runs options.repeats rounds of train::time_train_steps on `synthetic` (converting a uint8 batch
/// before each step, as the pipeline's compute stage does) and
/// train::time_pipeline_steps on `dataset` through `input` (named `source` in errors), both with
/// `trainer`, and takes the medians. Both convert the uint8 pixels into the trainer's compute
/// dtype and its model's layout, which `synthetic` must be in (train::synthetic_batch). Throws
/// what those throw.
TrainingBenchResult measure_training(nn::Trainer& trainer, nn::Backend& backend, const train::BatchTensors& synthetic,
                                     const nodes::DatasetPtr& dataset, train::InputConfig input,
                                     const std::string& source, const TrainingBenchOptions& options);

}  // namespace stoke::bench
