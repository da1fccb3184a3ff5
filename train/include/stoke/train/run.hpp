// Run: one training run put together from a Recipe -- the datasets, the model (its input channels
// taken from the data), the replica strategy and the trainer, each made once, in the order they
// depend on each other, on the machine the caller chose -- and fit over it. `stoke train` and
// examples/train are this plus option parsing and printing; under mpirun the same lines train
// data-parallel.
//
//   Ranks ranks;                                             // alone, or a rank of mpirun's job
//   Run run(recipe, open_training_data("photos/train", {}, "auto", recipe.batch),
//           make_compute(rank_device("auto", ranks), &std::cerr), {.communicator = &ranks.communicator()});
//   const FitResult result = run.fit(callbacks);
//
// What the run holds lives as long as it does; the trainer and model may be used between fits
// (evaluate, save).
#pragma once

#include <cstddef>
#include <memory>
#include <stoke/dist/communicator.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>

#include "stoke/train/compute.hpp"
#include "stoke/train/data_parallel.hpp"
#include "stoke/train/fit.hpp"
#include "stoke/train/recipe.hpp"

namespace stoke::train {

struct RunOptions {
  /// The ranks of a data-parallel run (Ranks::communicator(), or dist::connect()); null or one rank: alone.
  dist::Communicator* communicator = nullptr;
  /// How the gradients and batch norm are synced when there are ranks.
  DataParallelOptions data_parallel{};
  /// A checkpoint to continue from: its weights, optimizer state, epoch, position and LR.
  std::string resume{};
};

class Run {
 public:
  /// Throws std::runtime_error naming the training set when its samples carry masks or targets
  /// (a run trains classifiers on labels), and what make_model, DataParallel and Trainer::load
  /// throw (a checkpoint of another model names both).
  Run(Recipe recipe, TrainingData data, ComputeContext compute, RunOptions options = {});
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  const Recipe& recipe() const noexcept { return recipe_; }
  const TrainingData& data() const noexcept { return data_; }
  const ComputeContext& compute() const noexcept { return compute_; }
  nn::Backend& backend() const noexcept { return *compute_.backend; }
  nn::Sequential& model() const noexcept { return *model_; }
  nn::Trainer& trainer() const noexcept { return *trainer_; }
  /// The ranks of the run (1 alone).
  int world() const noexcept;
  /// "2 ranks (MPI ...), 4 gradient buckets, batch norm synced" (DataParallel::describe); "" alone.
  std::string describe_ranks() const;
  /// The model's input channels, from the data's first item (1 for grayscale scans with
  /// DecodeColor::keep), and its classes.
  int channels() const noexcept { return channels_; }
  int classes() const noexcept;
  /// Images into the first epoch where a resumed run starts (0: at an epoch's start, or not resumed).
  std::size_t resume_position() const noexcept { return resume_position_; }

  /// fit_options(recipe, classes, channels) with the communicator set: change what you need and
  /// pass it to fit.
  FitOptions fit_options() const;
  /// Trains from the trainer's epoch to the recipe's last: train::fit over the run's datasets.
  FitResult fit(const FitCallbacks& callbacks, const FitOptions& options);
  FitResult fit(const FitCallbacks& callbacks = {}) { return fit(callbacks, fit_options()); }

 private:
  Recipe recipe_;
  TrainingData data_;
  ComputeContext compute_;  // before what computes on it: destroyed after them
  dist::Communicator* communicator_;
  int channels_ = 3;
  std::unique_ptr<nn::Sequential> model_;
  std::unique_ptr<DataParallel> replicas_;
  std::unique_ptr<nn::Trainer> trainer_;
  std::size_t resume_position_ = 0;
};

}  // namespace stoke::train
