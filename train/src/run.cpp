#include "stoke/train/run.hpp"

#include <stdexcept>
#include <utility>

#include "stoke/train/input.hpp"

namespace stoke::train {

namespace {

// The model's input channels, from the first item of the training set: the data decides them
// (DecodeColor::keep: 1 for grayscale scans). A classifier has no use for masks or targets, and
// dropping them quietly would hide a mistaken dataset.
int input_channels(const Recipe& recipe, const TrainingData& data) {
  const InputConfig probe = training_input(recipe);
  const nodes::BatchShape shape = batch_shape(*data.train, probe, make_transforms(probe));
  if (shape.mask || !shape.targets.empty()) {
    throw std::runtime_error(data.train_path.string() + ": its samples carry " +
                             (shape.mask ? std::string("masks") : std::string("targets")) +
                             ", but stoke train trains image classifiers on labels; build a segmentation or "
                             "regression loop on the library (see examples/segmentation)");
  }
  return shape.channels;
}

}  // namespace

Run::Run(Recipe recipe, TrainingData data, ComputeContext compute, RunOptions options)
    : recipe_(std::move(recipe)),
      data_(std::move(data)),
      compute_(std::move(compute)),
      communicator_(options.communicator) {
  if (!data_.train) throw std::invalid_argument("train::Run: no training set");
  if (!compute_.backend) throw std::invalid_argument("train::Run: no backend (make one with make_compute)");
  channels_ = input_channels(recipe_, data_);
  model_ = make_model(recipe_, classes(), *compute_.backend, channels_);
  // With ranks, the gradients summed over them during backward, and batch norm over every
  // rank's batch when asked; alone, nothing.
  if (communicator_ != nullptr) {
    replicas_ = std::make_unique<DataParallel>(*communicator_, compute_.device, *compute_.backend, *model_,
                                               options.data_parallel);
  }
  nn::TrainerOptions settings = trainer_options(recipe_, data_.train->size() / static_cast<std::size_t>(world()));
  if (replicas_) replicas_->attach(settings);
  trainer_ = std::make_unique<nn::Trainer>(*model_, *compute_.backend, settings);
  if (!options.resume.empty()) {
    trainer_->load(options.resume);
    resume_position_ = train::resume_position(*trainer_, options.resume);
  }
}

Run::~Run() = default;

int Run::world() const noexcept { return communicator_ != nullptr ? communicator_->world() : 1; }

std::string Run::describe_ranks() const { return replicas_ ? replicas_->describe() : std::string(); }

int Run::classes() const noexcept { return static_cast<int>(data_.train->classes().size()); }

FitOptions Run::fit_options() const {
  FitOptions options = train::fit_options(recipe_, data_.train->classes(), channels_);
  options.communicator = communicator_;
  return options;
}

FitResult Run::fit(const FitCallbacks& callbacks, const FitOptions& options) {
  return train::fit(*trainer_, data_.train, data_.val, options, callbacks);
}

}  // namespace stoke::train
