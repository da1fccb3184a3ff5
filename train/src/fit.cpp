#include "stoke/train/fit.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <stoke/graph/signal.hpp>
#include <string>

#include "replica_strategy.hpp"
#include "stoke/train/loader.hpp"

namespace stoke::train {

namespace fs = std::filesystem;

namespace {

double ratio(std::int64_t part, std::int64_t whole) {
  return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0;
}

// A fit run's training and validation: one training pipeline for all the epochs
// (ComputePath::run_epochs), and at each epoch's end -- the compute stage holding the next
// epoch's batches -- the validation pass, the summary, the checkpoints and the callbacks.
class FitRun {
 public:
  FitRun(nn::Trainer& trainer, const FitCallbacks& callbacks, const nodes::DatasetPtr& train_set,
         const InputConfig& train_input, detail::ReplicaStrategy& replicas)
      : trainer_(trainer),
        callbacks_(callbacks),
        order_(train_set->size(), {.shuffle = train_input.shuffle,
                                   .seed = train_input.seed,
                                   .rank = train_input.rank,
                                   .world = train_input.world,
                                   .remainder = train_input.remainder}),
        batch_(train_input.batch_size),
        next_lr_(trainer.lr()),
        replicas_(replicas) {}

  // The training step. It runs in the compute stage, one batch at a time, in order.
  StepResult train_step(const BatchTensors& t) {
    if (t.epoch != positions_epoch_) {  // the epoch's first batch: where its items are in its order
      position_of_ = positions_in(order_, t.epoch);
      positions_epoch_ = t.epoch;
    }
    const std::int64_t step = trainer_.step();
    const float lr = trainer_.lr();
    StepResult r{.loss = trainer_.train_batch(t.images, t.labels)};
    const bool stepped = trainer_.step() != step;
    if (stepped && !t.indices.empty())
      position_ = std::max<std::size_t>(position_, position_of_[t.indices.back()] + 1u);
    ++batches_;
    if (!stand_in_.images.defined()) {  // a batch's shape, for the steps a short share makes up
      stand_in_.images = trainer_.backend().zeros(t.images.shape(), t.images.dtype(), t.images.layout());
      stand_in_.labels = trainer_.backend().zeros(t.labels.shape(), t.labels.dtype(), t.labels.layout());
    }
    next_lr_ = trainer_.lr();
    if (callbacks_.on_step) {
      // Called once the step's loss is on the host, with what this step was.
      r.on_result = [this, epoch = t.epoch, steps = trainer_.step(), stepped, lr,
                     position = position_](const StepOutcome& o) {
        callbacks_.on_step({.epoch = epoch + 1,
                            .step = steps,
                            .stepped = stepped,
                            .lr = lr,
                            .loss = o.loss ? o.loss->loss : 0,
                            .correct = o.loss ? o.loss->correct : 0,
                            .images = static_cast<std::int64_t>(o.size()),
                            .position = position});
      };
    }
    return r;
  }

  StepResult evaluate_step(const BatchTensors& t) {
    StepResult r;
    r.loss = trainer_.evaluate_batch(t.images, t.labels, &r.logits);  // top-5 is counted from the logits
    return r;
  }

  // A training pass begins: epoch `epoch` (from 0), `skip` items into this rank's share of its order.
  void begin_training(std::int64_t epoch, std::size_t skip) {
    epoch_ = epoch;
    position_ = skip;
    batches_ = 0;
    const std::size_t share = order_.per_epoch();
    planned_batches_ = static_cast<std::int64_t>((share - std::min(share, skip)) / batch_);
    pass_images_ = planned_batches_ * static_cast<std::int64_t>(batch_);
    if (callbacks_.on_pass_begin) callbacks_.on_pass_begin(epoch + 1, Phase::train);
  }

  // At an epoch's end, data-parallel: a share that ran short of its planned batches (files skipped)
  // makes the missing steps up with stand-in batches, so that the other ranks' steps find it; a
  // pass cut by Ctrl-C tells the others. Returns whether the run stops.
  bool finish_share(const EpochTotals& totals) {
    if (!replicas_.makes_up_steps()) return totals.stopped;
    if (!totals.stopped) {
      while (batches_ < planned_batches_ && stand_in_.images.defined()) {
        if (replicas_.agree_stop(graph::SignalStop::received() > 0)) return true;
        const nn::LossResult r = trainer_.stand_in_batch(stand_in_.images, stand_in_.labels);
        (void)r;
        ++batches_;
        ++made_up_;
      }
    }
    return replicas_.agree_stop(totals.stopped || graph::SignalStop::received() > 0);
  }
  std::int64_t made_up() const noexcept { return made_up_; }

  EpochTotals validate(ComputePath& path, const nodes::DatasetPtr& dataset) {
    const std::int64_t epoch = epoch_;
    if (callbacks_.on_pass_begin) callbacks_.on_pass_begin(epoch + 1, Phase::evaluate);
    EpochTotals totals =
        path.run([this](const BatchTensors& t) { return evaluate_step(t); },
                 {.stage = "evaluate", .progress = progress(Phase::evaluate, share_of(dataset->size())), .window = {}},
                 {.epoch = static_cast<std::uint32_t>(epoch), .skip = 0, .trace_file = {}});
    if (callbacks_.on_pass_end) callbacks_.on_pass_end(epoch + 1, Phase::evaluate, totals);
    return totals;
  }

  EpochProgress training_progress() { return progress(Phase::train, -1); }
  // This rank's items of a validation pass over `size` (every item once over the ranks).
  std::int64_t share_of(std::size_t size) const {
    const nodes::OrderOptions& o = order_.options();
    return static_cast<std::int64_t>(
        nodes::EpochOrder(size, {.shuffle = false, .seed = 0, .rank = o.rank, .world = o.world}).per_epoch());
  }
  std::size_t position() const noexcept { return position_; }

 private:
  // pass_images < 0: the training pass's, which changes with the epoch.
  EpochProgress progress(Phase phase, std::int64_t pass_images) {
    if (!callbacks_.on_progress) return {};
    return [this, phase, pass_images](const EpochTotals& t, const graph::Pipeline& pipe) {
      callbacks_.on_progress({.epoch = epoch_ + 1,
                              .phase = phase,
                              .totals = t,
                              .pass_images = pass_images < 0 ? pass_images_.load() : pass_images,
                              .lr = next_lr_,
                              .pipeline = pipe});
    };
  }

  nn::Trainer& trainer_;
  const FitCallbacks& callbacks_;
  const nodes::EpochOrder order_;
  const std::size_t batch_;
  // The compute stage's (the step's); read by this thread at an epoch's end, while it waits.
  std::vector<std::uint32_t> position_of_;
  std::uint32_t positions_epoch_ = ~std::uint32_t{0};
  std::size_t position_ = 0;  // where the run is in the epoch's order after the last full optimizer step
  // Read by the progress callback on the results stage while the compute stage moves on.
  std::atomic<float> next_lr_;
  std::atomic<std::int64_t> epoch_ = 0;
  std::atomic<std::int64_t> pass_images_ = 0;
  // Data-parallel: the batches this epoch's share should give and has given, and a batch's shape
  // in zeros for the steps a short share makes up.
  detail::ReplicaStrategy& replicas_;
  std::int64_t planned_batches_ = 0;
  std::int64_t batches_ = 0;
  std::int64_t made_up_ = 0;
  struct {
    nn::Tensor images;
    nn::Tensor labels;
  } stand_in_;
};

EpochSummary summarize(std::int64_t epoch, int epochs, EpochTotals train, EpochTotals val) {
  EpochSummary s;
  s.epoch = epoch + 1;
  s.epochs = epochs;
  s.train_loss = train.images > 0 ? train.loss_sum / static_cast<double>(train.images) : 0;
  s.train_top1 = ratio(train.correct, train.images);
  if (val.images > 0 && !val.stopped) {
    s.val_top1 = ratio(val.correct, val.images);
    s.val_top5 = ratio(val.correct_top5, val.images);
  }
  s.images_per_sec = train.seconds > 0 ? static_cast<double>(train.images) / train.seconds : 0;
  s.skipped = train.skipped + val.skipped;
  s.completed = !train.stopped;
  s.interrupted = train.stopped || val.stopped;
  s.train = std::move(train);
  s.val = std::move(val);
  return s;
}

// Adds an epoch's figures to the run's.
void accumulate(FitResult& result, const EpochSummary& s, std::size_t max_listed_skips) {
  if (s.val_top1) {
    result.val_top1 = s.val_top1;
    result.val_top5 = s.val_top5;
    result.best_val_top1 = std::max(result.best_val_top1.value_or(0), *s.val_top1);
  }
  result.images += s.train.images;
  result.seconds += s.train.seconds + s.val.seconds;
  result.skipped += s.skipped;
  for (const EpochTotals* totals : {&s.train, &s.val}) {
    // Each file once, with the run's epochs (from 1) it was skipped in.
    std::vector<SkippedFile> files = totals->skipped_files;
    for (SkippedFile& f : files) f.epochs = {s.epoch};
    merge_skipped_files(result.skipped_files, files, max_listed_skips);
    result.stalls.insert(result.stalls.end(), totals->report.stalls.begin(), totals->report.stalls.end());
  }
  result.checkpoint = s.checkpoint;
  result.interrupted = s.interrupted;
}

}  // namespace

double allreduce_hidden(const EpochSummary& s) noexcept {
  return s.allreduce_seconds > 0 ? std::max(0.0, 1.0 - s.allreduce_exposed_seconds / s.allreduce_seconds) : 0;
}

const char* to_string(Phase phase) noexcept { return phase == Phase::train ? "train" : "evaluate"; }

TrainingData open_training_data(const fs::path& train, const fs::path& val, const std::string& format,
                                std::size_t batch_size) {
  TrainingData data{.train = open_dataset(train, format), .val = nullptr, .train_path = train, .val_path = val};
  if (val.empty() && train.filename() == "train" && fs::is_directory(train.parent_path() / "val")) {
    data.val_path = train.parent_path() / "val";
  }
  if (!data.val_path.empty()) data.val = open_dataset(data.val_path, format);
  if (data.train->size() < batch_size) {
    throw std::runtime_error(train.string() + " has " + std::to_string(data.train->size()) +
                             " images, fewer than one batch of " + std::to_string(batch_size) +
                             " (lower the batch size)");
  }
  if (data.train->label(0) < 0) {
    throw std::runtime_error(train.string() +
                             ": its items carry no class labels (a COCO set's carry boxes, a segmentation folder's "
                             "masks), and training here is of image classifiers on labels; read it with `stoke bench "
                             "pipeline` or stoke.Loader, or build a loop on the library (see examples/segmentation)");
  }
  const std::size_t classes = data.train->classes().size();
  if (classes < 2) {
    throw std::runtime_error(train.string() + " has " + std::to_string(classes) +
                             " class; a classifier needs at least two (one subfolder per class)");
  }
  if (data.val && data.val->classes() != data.train->classes()) {
    throw std::runtime_error(data.val_path.string() + " has other classes than " + train.string() +
                             " (the same subfolder names are needed in both)");
  }
  return data;
}

std::int64_t steps_per_epoch(std::size_t train_images, std::size_t batch_size, int accumulation) {
  if (batch_size == 0 || accumulation < 1)
    throw std::invalid_argument("steps_per_epoch: batch size and accumulation must be positive");
  const auto batches = static_cast<std::int64_t>(train_images / batch_size);
  return std::max<std::int64_t>(1, batches / accumulation);
}

nn::LrScheduleOptions epoch_schedule(nn::LrScheduleKind kind, float lr, double warmup_epochs,
                                     std::int64_t steps_per_epoch, int epochs) {
  const std::int64_t total_steps = steps_per_epoch * epochs;
  const auto warmup_steps = std::min<std::int64_t>(
      static_cast<std::int64_t>(warmup_epochs * static_cast<double>(steps_per_epoch)), total_steps - 1);
  return {.kind = kind,
          .base_lr = lr,
          .total_steps = total_steps,
          .warmup_steps = std::max<std::int64_t>(warmup_steps, 0),
          .warmup_start = 0.0f,
          .step_size = std::max<std::int64_t>(1, total_steps * 3 / 10),
          .gamma = 0.1f,
          .min_lr = 0.0f};
}

InputConfig evaluation_input(const InputConfig& train, std::vector<std::string> transforms) {
  InputConfig val = train;
  val.transforms = std::move(transforms);
  val.tuning.target = "evaluate";
  val.shuffle = false;
  val.drop_last = false;
  val.start = 0;
  val.trace_file.clear();
  return val;
}

CheckpointPolicy checkpoint_every_epoch(fs::path folder) {
  return [folder = std::move(folder)](const EpochSummary& s) {
    fs::create_directories(folder);
    std::vector<fs::path> files{folder / "last.safetensors"};
    if (s.completed) files.push_back(folder / ("epoch_" + std::to_string(s.epoch) + ".safetensors"));
    return files;
  };
}

std::string epoch_order_name(const nodes::OrderOptions& order) {
  std::string name = epoch_order_version;
  if (order.shuffle && order.groups.window > 0 && order.groups.starts && !order.groups.starts->empty()) {
    name += " groups=" + std::to_string(order.groups.starts->size()) + " window=" + std::to_string(order.groups.window);
  }
  return name;
}

namespace {

// A resume inside an epoch visits the rest of the order the checkpoint's run visited: the same
// window of shards (a tar format's window=W) over the same number of shards.
void check_same_order(const nn::Trainer& trainer, std::size_t resume, const std::string& order_name) {
  if (resume == 0) return;
  const auto& metadata = trainer.metadata();
  const auto it = metadata.find(epoch_order_key);
  const std::string saved = it == metadata.end() ? epoch_order_version : it->second;
  if (saved == order_name) return;
  throw std::runtime_error("the checkpoint stopped inside epoch " + std::to_string(trainer.epoch() + 1) +
                           " of an epoch order (" + saved + ") other than this run's (" + order_name +
                           "): resuming there would train on other images. Give the data and the window= it "
                           "was trained with, or resume from a checkpoint written at an epoch's end");
}

}  // namespace

std::size_t resume_position(const nn::Trainer& trainer, const std::string& checkpoint) {
  const auto& metadata = trainer.metadata();
  const auto it = metadata.find(epoch_position_key);
  const std::size_t position =
      it == metadata.end() ? 0 : static_cast<std::size_t>(std::strtoull(it->second.c_str(), nullptr, 10));
  const auto order = metadata.find(epoch_order_key);
  const std::string name = order == metadata.end() ? "1" : order->second;
  const std::string version = name.substr(0, name.find(' '));
  if (position > 0 && version != epoch_order_version) {
    throw std::runtime_error(
        (checkpoint.empty() ? std::string("the checkpoint") : checkpoint) + " stopped " + std::to_string(position) +
        " items into epoch " + std::to_string(trainer.epoch() + 1) + " of an epoch order (version " + version +
        ") that this stoke no longer makes (version " + epoch_order_version +
        "): resuming there would train on other images. Resume from a checkpoint written at the end of an epoch "
        "(epoch_N.safetensors), or start the run again");
  }
  return position;
}

FitResult fit(nn::Trainer& trainer, const nodes::DatasetPtr& train_set, const nodes::DatasetPtr& val_set,
              const FitOptions& options, const FitCallbacks& callbacks) {
  if (!train_set) throw std::invalid_argument("fit: no training set");
  const std::uint32_t world =
      options.communicator != nullptr ? static_cast<std::uint32_t>(options.communicator->world()) : 1;
  const std::uint32_t rank =
      options.communicator != nullptr ? static_cast<std::uint32_t>(options.communicator->rank()) : 0;
  InputConfig train_input = options.train_input;
  train_input.tuning.target = "train";
  train_input.drop_last = true;
  train_input.rank = rank;
  train_input.world = world;
  train_input.remainder = world > 1 ? options.shard_remainder : nodes::ShardRemainder::uneven;
  train_input.seed = options.seed;  // each epoch's order and draws: functions of (seed, epoch, item)
  InputConfig val_input = options.val_input;
  val_input.tuning.target = "evaluate";
  val_input.rank = rank;
  val_input.world = world;
  val_input.remainder = nodes::ShardRemainder::uneven;  // every item counted once
  // The batches arrive in the dtype and layout the model computes in: no cast, no transpose.
  for (InputConfig* input : {&train_input, &val_input}) {
    input->convert_dtype = trainer.options().compute;
    input->convert_layout = trainer.model().layout();
  }

  FitResult result;
  result.left_out = left_out_of(*train_set);
  if (val_set && val_set != train_set) merge_left_out(result.left_out, left_out_of(*val_set));
  const std::int64_t first_epoch = trainer.epoch();  // the loop moves trainer.epoch() on
  // The checkpoint's position counts the items of the whole order: this rank's share starts at
  // its world's share of it (rounded down to a multiple of the world size).
  const std::size_t resume = resume_position(trainer) / world;
  if (first_epoch >= options.epochs) {  // nothing left to train: no pools to make
    result.epochs = first_epoch;
    return result;
  }
  const std::string order_name = epoch_order_name(order_options(*train_set, train_input));
  check_same_order(trainer, resume, order_name);
  // Every replica starts from rank 0's state, and says so.
  const std::unique_ptr<detail::ReplicaStrategy> replicas = detail::make_replica_strategy(options.communicator);
  replicas->start(trainer);
  // The pools, device slots and buffers of both passes, made once for the whole run; one
  // training pipeline for all the epochs.
  ComputePath train_path(train_set, train_input, trainer.backend());
  std::optional<ComputePath> val_path;
  if (val_set) val_path.emplace(val_set, val_input, trainer.backend());
  FitRun run(trainer, callbacks, train_set, train_input, *replicas);
  run.begin_training(first_epoch, resume);
  std::map<std::string, std::string> metadata = options.metadata;

  // At each epoch's end: the validation pass, the summary, the checkpoints and the callbacks.
  // Returns whether the run goes on.
  const auto at_epoch_end = [&](std::uint32_t e, EpochTotals& train_totals) {
    const auto epoch = static_cast<std::int64_t>(e);
    // The ranks end the epoch at the same step (a short share makes steps up), and the figures
    // become the whole world's.
    if (run.finish_share(train_totals)) train_totals.stopped = true;
    std::vector<double> rates = replicas->reduce_train(train_totals);
    if (callbacks.on_pass_end) callbacks.on_pass_end(epoch + 1, Phase::train, train_totals);
    EpochTotals val_totals;
    if (val_path && !train_totals.stopped) {
      val_totals = run.validate(*val_path, val_set);
      replicas->reduce_val(val_totals);
    }
    EpochSummary summary = summarize(epoch, options.epochs, std::move(train_totals), std::move(val_totals));
    summary.rank_images_per_sec = std::move(rates);
    replicas->add_sync_figures(summary);

    trainer.set_epoch(summary.completed ? epoch + 1 : epoch);
    metadata[epoch_position_key] = std::to_string(summary.completed ? 0 : run.position() * world);
    metadata[epoch_order_key] = order_name;
    trainer.set_metadata(metadata);
    replicas->check_replicas(trainer, epoch + 1);
    summary.checkpoint = result.checkpoint;
    if (callbacks.checkpoint) {
      const std::vector<fs::path> files = callbacks.checkpoint(summary);
      replicas->before_save();  // every rank has stepped to here: rank 0's state is theirs
      if (rank == 0) {
        for (const fs::path& file : files) trainer.save(file);  // each atomic: temporary file, flush, rename
      }
      if (!files.empty()) summary.checkpoint = files.front();
    }
    accumulate(result, summary, options.max_listed_skips);
    const bool go_on = replicas->agree_go_on(!(callbacks.on_epoch && !callbacks.on_epoch(summary)));
    if (!go_on && !summary.interrupted) {
      result.stopped_early = epoch + 1 < options.epochs;
      return false;
    }
    if (summary.interrupted) return false;
    if (epoch + 1 < options.epochs) run.begin_training(epoch + 1, 0);
    return true;
  };
  train_path.run_epochs(
      [&run](const BatchTensors& t) { return run.train_step(t); },
      {.stage = "train", .progress = run.training_progress(), .window = {}, .stop = replicas->stop_rule()},
      {.epoch = static_cast<std::uint32_t>(first_epoch), .skip = resume, .trace_file = options.trace_file},
      static_cast<std::uint32_t>(options.epochs - first_epoch), at_epoch_end);
  result.epochs = trainer.epoch();
  result.made_up_steps = run.made_up();
  result.network = train_set->network();
  return result;
}

}  // namespace stoke::train
