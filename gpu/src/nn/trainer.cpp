#include "stoke/gpu/nn/trainer.hpp"

#include <stdexcept>
#include <string>

namespace stoke::gpu::nn {

namespace {

const TrainerOptions& checked(const TrainerOptions& options) {
  if (options.accumulation < 1) {
    throw std::invalid_argument("Trainer: accumulation is " + std::to_string(options.accumulation) +
                                "; it must be at least 1 (batches per optimizer step)");
  }
  return options;
}

}  // namespace

Trainer::Trainer(Layer& model, Backend& backend, const TrainerOptions& options)
    : model_(model),
      backend_(backend),
      options_(checked(options)),
      optimizer_(model, backend, options.sgd),
      schedule_(options.schedule),
      loss_({.label_smoothing = options.label_smoothing}) {}

LossResult Trainer::train_batch(const Tensor& images, const Tensor& labels) {
  Context ctx{.backend = backend_, .mode = Mode::train, .seed = options_.seed,
              .step = static_cast<std::uint64_t>(step_ * options_.accumulation + accumulated_)};
  const Tensor logits = model_.forward(images, ctx);
  LossResult result = loss_.forward(logits, labels, ctx);
  model_.backward(result.dlogits, ctx);
  model_.release_activations();
  result.dlogits = {};
  if (++accumulated_ == options_.accumulation) {
    // The gradients hold the sum of `accumulation` batch means: step with their mean.
    optimizer_.step(schedule_.at(step_), 1.0f / static_cast<float>(options_.accumulation));
    accumulated_ = 0;
    ++step_;
  }
  return result;
}

LossResult Trainer::evaluate_batch(const Tensor& images, const Tensor& labels) {
  Context ctx{.backend = backend_, .mode = Mode::eval, .seed = options_.seed, .step = 0};
  const Tensor logits = model_.forward(images, ctx);
  return loss_.forward(logits, labels, ctx);
}

void Trainer::save(const std::filesystem::path& path) {
  const TrainingState state{.epoch = epoch_,
                            .step = step_,
                            .lr = schedule_.at(step_),
                            .loss_scale = 1,
                            .seed = options_.seed,
                            .extra = {}};
  save_checkpoint(path, model_, &optimizer_, state, backend_.stream());
}

void Trainer::load(const std::filesystem::path& path) {
  const TrainingState state = load_checkpoint(path, model_, &optimizer_, backend_.stream());
  step_ = state.step;
  epoch_ = state.epoch;
  accumulated_ = 0;
  optimizer_.zero_grad();
}

}  // namespace stoke::gpu::nn
