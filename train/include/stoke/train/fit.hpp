// fit(): the training loop of `stoke train` as a library call -- epochs of a training pass and a
// validation pass through the whole graph, an exact resume position inside an epoch, Ctrl-C
// ending the run after the current step with a checkpoint, and callbacks for what a user adds
// (progress, per-step and per-epoch hooks, early stop, where and when to checkpoint).
//
//   const TrainingData data = open_training_data("photos/train");   // and photos/val beside it
//   const Recipe recipe{.epochs = 10};                                 // recipe.hpp: stoke train's settings
//   auto model = make_model(recipe, data.train->classes().size(), backend);
//   nn::Trainer trainer(*model, backend, trainer_options(recipe, data.train->size()));
//   FitCallbacks callbacks{.on_epoch = [](const EpochSummary& s) { return s.val_top1.value_or(0) < 0.99; },
//                          .checkpoint = checkpoint_every_epoch("runs/a")};
//   const FitResult result =
//       fit(trainer, data.train, data.val, fit_options(recipe, data.train->classes()), callbacks);
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stoke/dist/communicator.hpp>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nn/lr_schedule.hpp>
#include <stoke/nn/trainer.hpp>
#include <stoke/nodes/dataset.hpp>
#include <string>
#include <vector>

#include "stoke/train/epoch.hpp"
#include "stoke/train/input.hpp"

namespace stoke::train {

// ---- the data and the schedule

/// A run's datasets, and the paths they were opened from (for messages and reports).
struct TrainingData {
  nodes::DatasetPtr train{};
  nodes::DatasetPtr val{};  ///< null: no validation split
  std::filesystem::path train_path{};
  std::filesystem::path val_path{};  ///< empty when val is null
};

/// Opens `train` and `val` with open_dataset (`format` as there). An empty `val` means train's
/// sibling folder "val" when `train` is a folder named "train" and that sibling exists, else no
/// validation. Throws std::runtime_error naming the path and the fix when the training set has
/// fewer than `batch_size` images, no class labels (COCO, segmentation) or fewer than two classes,
/// or when the validation set's classes are not the training set's.
TrainingData open_training_data(const std::filesystem::path& train, const std::filesystem::path& val = {},
                                const std::string& format = "auto", std::size_t batch_size = 1);

/// Optimizer steps per epoch: whole batches of `batch_size` (the last partial one is dropped) over
/// `accumulation` batches per step, at least 1.
std::int64_t steps_per_epoch(std::size_t train_images, std::size_t batch_size, int accumulation);

/// The learning-rate schedule of `stoke train` over `epochs` epochs of `steps_per_epoch` steps:
/// `kind` peaking at `lr` after `warmup_epochs` of linear warmup from 0 (at most all steps but
/// one); the step schedule multiplies by 0.1 every 30% of the run.
nn::LrScheduleOptions epoch_schedule(nn::LrScheduleKind kind, float lr, double warmup_epochs,
                                     std::int64_t steps_per_epoch, int epochs);

/// The validation input that goes with a training one: the same batch size, image size, threads,
/// scheduler, error policy, decode options and allocator, with `transforms` (e.g.
/// default_eval_transforms), no shuffling and the last partial batch kept.
InputConfig evaluation_input(const InputConfig& train, std::vector<std::string> transforms);

// ---- the run's options and callbacks

/// The two passes of an epoch; fit's stage names ("train", "evaluate") are their names.
enum class Phase { train, evaluate };
const char* to_string(Phase phase) noexcept;

struct FitOptions {
  /// Epochs of the whole run, counted from 0: a trainer restored at epoch 3 of 10 trains 7 more.
  int epochs = 10;
  /// Shuffling and augmentation: epoch e's order and each item's draws are functions of
  /// (seed, e, item) (nodes::EpochOrder, ItemRng), computed by the library.
  std::uint64_t seed = 0;
  /// The training pipeline (see training_input in recipe.hpp): one for all the epochs, from the
  /// trainer's epoch and resume position; its compute stage is "train" and it keeps whole batches
  /// only (drop_last).
  InputConfig train_input{};
  /// The validation pipeline (see evaluation_input); its sink stage is "evaluate".
  InputConfig val_input{};
  /// A Chrome trace of the training pipeline (all its epochs, up to
  /// PipelineOptions::max_trace_spans spans). Empty: none.
  std::filesystem::path trace_file{};
  /// Saved with every checkpoint (e.g. to_metadata(card)), together with the epoch position.
  std::map<std::string, std::string> metadata{};
  /// Skipped files listed in FitResult (all are counted).
  std::size_t max_listed_skips = 100;
  /// Data-parallel training (stoke::dist): the ranks' communicator, every rank calling fit with the
  /// same options; null or a world of 1: this process alone. Each rank trains on its share of every
  /// epoch (rank r of w: positions r, r + w, ... of the epoch's order, so one step of all the ranks
  /// sees the items one process would with w times the batch), every rank runs the same number of
  /// steps (`shard_remainder`), validation is sharded (every item once) and its totals summed over
  /// the ranks, the training state is broadcast from rank 0 at the start and compared across the
  /// ranks after every epoch, checkpoints are written by rank 0 after a barrier (their position
  /// counts the items of the whole order, so a run resumed with another world size goes on at the
  /// same place: at the largest multiple of the new world size at or below it), and Ctrl-C stops
  /// every rank at the same step. The gradients are the trainer's (TrainerOptions::gradient_sync).
  dist::Communicator* communicator = nullptr;
  /// What a world size that does not divide the training set does with the items left over: drop
  /// them for the epoch (the default: the items change with each epoch's order) or pad with repeats.
  nodes::ShardRemainder shard_remainder = nodes::ShardRemainder::drop;
};

/// What on_progress sees, about every 250 ms of a pass.
struct FitProgress {
  std::int64_t epoch = 0;  ///< from 1
  Phase phase = Phase::train;
  const EpochTotals& totals;        ///< the pass so far
  std::int64_t pass_images;         ///< the images this pass will see in all (a training pass: whole batches)
  float lr;                         ///< the learning rate of the next optimizer step
  const graph::Pipeline& pipeline;  ///< running: Pipeline::stats() is safe
};

/// What on_step sees after each training batch.
struct StepEvent {
  std::int64_t epoch = 0;    ///< from 1
  std::int64_t step = 0;     ///< optimizer steps taken in the whole run (Trainer::step())
  bool stepped = false;      ///< this batch completed an optimizer step (not one accumulated)
  float lr = 0;              ///< the learning rate this batch's step used
  double loss = 0;           ///< the batch's mean loss
  std::int64_t correct = 0;  ///< rows whose top class is the label
  std::int64_t images = 0;   ///< the batch's size
  std::size_t position = 0;  ///< the resume point: items of the epoch's order trained on by full steps
};

/// One epoch's results, given to the checkpoint policy and then to on_epoch.
struct EpochSummary {
  std::int64_t epoch = 0;  ///< from 1
  int epochs = 0;          ///< of the run
  EpochTotals train{};     ///< the training pass
  /// The validation pass; empty (images 0) without a split or after an interrupted training pass.
  EpochTotals val{};
  double train_loss = 0;             ///< mean over the images
  double train_top1 = 0;             ///< 0..1
  std::optional<double> val_top1{};  ///< 0..1; none when the validation pass did not run to its end
  std::optional<double> val_top5{};
  double images_per_sec = 0;  ///< the training pass's
  std::uint64_t skipped = 0;  ///< images skipped by both passes
  bool completed = false;     ///< the training pass went through the whole epoch
  bool interrupted = false;   ///< Ctrl-C (graph::SignalStop) during the epoch: the run ends
  /// Data-parallel runs: each rank's training images per second, by rank (empty alone), and this
  /// rank's gradient all-reduce this epoch: the seconds its sums took and the part of them the
  /// step waited for (the rest was hidden under backward).
  std::vector<double> rank_images_per_sec{};
  double allreduce_seconds = 0;
  double allreduce_exposed_seconds = 0;
  /// The newest checkpoint the run has written, this epoch's included (the one to resume from);
  /// empty when none. The checkpoint policy, called before this epoch's are written, sees the
  /// previous one.
  std::filesystem::path checkpoint{};
};

/// The share (0..1) of an epoch's gradient all-reduce that ran while backward was still computing.
double allreduce_hidden(const EpochSummary& s) noexcept;

/// Where fit saves the training state after an epoch (also an interrupted one, which then holds
/// the resume position): the files to write, in order, the one to resume from first. Each is
/// written atomically (Trainer::save). Empty: none this epoch.
using CheckpointPolicy = std::function<std::vector<std::filesystem::path>(const EpochSummary&)>;

/// `stoke train`'s policy: `folder`/last.safetensors after every epoch, and
/// `folder`/epoch_N.safetensors after each completed one. Creates the folder when first used.
CheckpointPolicy checkpoint_every_epoch(std::filesystem::path folder);

/// What a user adds to the loop. Every callback is optional, runs on one thread at a time, and
/// may throw (the run ends with that exception, after the pipeline has stopped cleanly).
/// on_progress and on_step run inside the compute stage, so they must be quick.
struct FitCallbacks {
  /// A pass starts (its pipeline is about to run).
  std::function<void(std::int64_t epoch, Phase phase)> on_pass_begin{};
  /// About every 250 ms of a pass.
  std::function<void(const FitProgress&)> on_progress{};
  /// A pass ended, with its totals.
  std::function<void(std::int64_t epoch, Phase phase, const EpochTotals&)> on_pass_end{};
  /// After each training batch's step.
  std::function<void(const StepEvent&)> on_step{};
  /// After each epoch and its checkpoints: return false to end the run there (early stop).
  std::function<bool(const EpochSummary&)> on_epoch{};
  /// Where and when to checkpoint; empty: never.
  CheckpointPolicy checkpoint{};
};

/// What fit did.
struct FitResult {
  std::int64_t epochs = 0;  ///< the trainer's epoch at the end: completed epochs, those before a resume included
  std::optional<double> val_top1{};  ///< the last validated epoch's
  std::optional<double> val_top5{};
  std::optional<double> best_val_top1{};
  std::int64_t images = 0;    ///< training images stepped on in this run
  double seconds = 0;         ///< in the passes (training and validation)
  std::uint64_t skipped = 0;  ///< skips: a file skipped in two epochs counts twice
  /// The first FitOptions::max_listed_skips files skipped, each once with the epochs (from 1) it
  /// was skipped in.
  std::vector<SkippedFile> skipped_files{};
  /// What the training set and then the validation set left out when they opened
  /// (Dataset::ignored(), left_out_of): never read, so neither trained on nor counted in `skipped`.
  LeftOut left_out{};
  /// What the training set read over the network (remote shards); nullopt when it is on local disk.
  std::optional<nodes::NetworkStats> network{};
  /// Pipeline calls that ran past InputConfig::stall's limit (the item: its file), every pass's.
  std::vector<graph::Stall> stalls{};
  std::filesystem::path checkpoint{};  ///< the newest written, the one to resume from; empty when none
  bool interrupted = false;            ///< ended by Ctrl-C
  bool stopped_early = false;          ///< ended by on_epoch
  /// Data-parallel: steps this rank took part in with a stand-in batch because its share of an
  /// epoch ran short (files skipped), so that the other ranks' steps found it.
  std::int64_t made_up_steps = 0;
  double images_per_sec() const { return seconds > 0 ? static_cast<double>(images) / seconds : 0; }
};

/// The checkpoint metadata key holding how many items of the epoch's order the run had trained
/// on when it was saved (0: the epoch's start).
inline constexpr const char* epoch_position_key = "epoch_position";

/// The checkpoint metadata key saying which epoch order the position refers to, and the version
/// this stoke writes. Version 2: epoch e's order is EpochOrder(seed).indices(e); version 1 (no key)
/// was an order per epoch from the seed `seed * 1000003 + e`.
inline constexpr const char* epoch_order_key = "epoch_order";
inline constexpr const char* epoch_order_version = "2";

/// The epoch_order_key value for an order: epoch_order_version, and for an order by groups
/// (OrderOptions::groups) " groups=G window=W", so that a resume inside an epoch can tell that it
/// would visit other items.
std::string epoch_order_name(const nodes::OrderOptions& order);

/// Where a trainer restored from a checkpoint resumes inside its epoch (its metadata's
/// epoch_position_key; 0 when absent). Throws std::runtime_error naming `checkpoint` (the file,
/// for the message) when the position is inside an epoch of an order this stoke no longer makes
/// (an older epoch_order_key): it would mean other items.
std::size_t resume_position(const nn::Trainer& trainer, const std::string& checkpoint = {});

/// Trains `trainer` on `train_set` from epoch trainer.epoch() (and resume_position(trainer) inside
/// it) to options.epochs: each epoch a training pass, then a validation pass on `val_set` (null:
/// none), trainer.set_epoch, the checkpoint policy's files, on_epoch. The training passes are one
/// pipeline for the whole run (ComputePath::run_epochs): at each epoch's end its compute stage
/// holds the next epoch's batches until validation, checkpoints and callbacks are done, while its
/// input stages prepare them. Validation runs through a second ComputePath, made once too. A Ctrl-C under a
/// graph::SignalStop (installed by the caller) ends the run after the current step: the epoch's
/// checkpoint still holds the position, and a later fit on the restored trainer continues at the
/// next batch with the same batches, as if never interrupted. Each batch of a seeded run is the
/// same whatever the thread count; on the CPU device the weights are then bit-identical.
/// `trainer` and the datasets must outlive the call; nothing else is kept. One fit per trainer at a
/// time: the trainer is not thread-safe.
FitResult fit(nn::Trainer& trainer, const nodes::DatasetPtr& train_set, const nodes::DatasetPtr& val_set,
              const FitOptions& options, const FitCallbacks& callbacks = {});

}  // namespace stoke::train
