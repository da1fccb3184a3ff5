#include "stoke/nn/trainer.hpp"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoke/nn/layer_profile.hpp"

namespace stoke::nn {

namespace {

// Below this the loss scale cannot be what overflows: the gradients are not finite at any scale
// (a NaN in the data, or a model that diverged), and skipping steps forever would hide it.
constexpr float kSmallestLossScale = 1.0f / 16777216.0f;  // 2^-24
// With the scale on the device, how often (in steps) the host reads it to check that bound.
constexpr std::int64_t kScaleCheckInterval = 64;

const TrainerOptions& checked(const TrainerOptions& options) {
  if (options.accumulation < 1) {
    throw std::invalid_argument("Trainer: accumulation is " + std::to_string(options.accumulation) +
                                "; it must be at least 1 (batches per optimizer step)");
  }
  if (options.compute != DType::f32 && options.compute != DType::bf16 && options.compute != DType::f16) {
    throw std::invalid_argument("Trainer: compute is " + std::string(to_string(options.compute)) +
                                "; it must be f32, bf16 or f16");
  }
  const LossScaleOptions& s = options.loss_scale;
  if (options.compute == DType::f16 && !(std::isfinite(s.initial) && s.initial > 0 && s.growth_interval >= 1 &&
                                         s.growth >= 1 && s.backoff > 0 && s.backoff < 1)) {
    throw std::invalid_argument("Trainer: the loss scale options (initial " + std::to_string(s.initial) +
                                ", growth_interval " + std::to_string(s.growth_interval) + ", growth " +
                                std::to_string(s.growth) + ", backoff " + std::to_string(s.backoff) +
                                ") need initial > 0, growth_interval >= 1, growth >= 1 and 0 < backoff < 1");
  }
  if (options.loss && options.label_smoothing != 0) {
    throw std::invalid_argument("Trainer: label_smoothing is " + std::to_string(options.label_smoothing) +
                                " but a loss is given (" + std::string(options.loss->name()) +
                                "); label smoothing is the default SoftmaxCrossEntropy's, give it to the loss");
  }
  return options;
}

std::unique_ptr<Optimizer> make_optimizer(Layer& model, Backend& backend, const TrainerOptions& options) {
  if (!options.optimizer) return std::make_unique<Sgd>(model, backend, options.sgd);
  std::unique_ptr<Optimizer> optimizer = options.optimizer(model, backend);
  if (!optimizer) throw std::invalid_argument("Trainer: the optimizer factory returned no optimizer");
  return optimizer;
}

std::shared_ptr<const Loss> make_loss(const TrainerOptions& options) {
  if (options.loss) return options.loss;
  return std::make_shared<SoftmaxCrossEntropy>(SoftmaxCrossEntropyOptions{.label_smoothing = options.label_smoothing});
}

}  // namespace

Trainer::Trainer(Layer& model, Backend& backend, const TrainerOptions& options)
    : model_(model),
      backend_(backend),
      options_(checked(options)),
      optimizer_(make_optimizer(model, backend, options_)),
      schedule_(options.schedule),
      loss_(make_loss(options_)),
      loss_scale_(options.compute == DType::f16 ? options.loss_scale.initial : 1.0f) {
  if (options_.compute == DType::f16 && optimizer_->skips_on_device()) {
    scale_state_ = backend_.empty({LossScaleState::size});
    scale_state_.copy_from(Tensor::from_values({LossScaleState::size}, {loss_scale_, 0, 0, 0}), backend_.stream());
    loss_scale_ = 1;
  }
}

std::int64_t Trainer::skipped_steps() const {
  if (!scale_state_.defined()) return skipped_steps_;
  return static_cast<std::int64_t>(device_scale_state()[LossScaleState::skipped]);
}

float Trainer::loss_scale() const {
  if (!scale_state_.defined()) return loss_scale_;
  return device_scale_state()[LossScaleState::scale];
}

std::vector<float> Trainer::device_scale_state() const { return scale_state_.to_vector(backend_.stream()); }

Tensor Trainer::prepare(const Tensor& images) {
  if (!backend_.supports(options_.compute, images.layout())) {
    throw std::invalid_argument("Trainer: the backend " + backend_.describe() + " cannot compute in " +
                                std::string(to_string(options_.compute)) + " with " +
                                std::string(to_string(images.layout())) + " images (" + images.describe() +
                                "); mixed precision needs a CUDA device");
  }
  if (images.dtype() == options_.compute) return images;
  Tensor cast = backend_.empty(images.shape(), options_.compute, images.layout());
  backend_.cast(images, cast);
  return cast;
}

LossResult Trainer::train_batch(const Tensor& images, const Tensor& labels) { return train(images, labels, 1); }

LossResult Trainer::stand_in_batch(const Tensor& images, const Tensor& labels) { return train(images, labels, 0); }

LossResult Trainer::train(const Tensor& images, const Tensor& labels, float weight) {
  const Tensor x = prepare(images);
  // The last batch of an accumulation group sums the group's gradients over the replicas.
  const bool sync = options_.gradient_sync != nullptr && accumulated_ + 1 == options_.accumulation;
  Context ctx{.backend = backend_,
              .mode = Mode::train,
              .seed = options_.seed,
              .step = static_cast<std::uint64_t>(step_ * options_.accumulation + accumulated_),
              .profile = profile_,
              .gradient_sync = sync ? options_.gradient_sync : nullptr,
              .batch_norm_sync = options_.batch_norm_sync};
  const Tensor logits = model_.forward(x, ctx);
  LossResult result;
  const auto loss = [&] { result = scaled_loss(logits, labels, ctx, weight); };
  if (profile_ != nullptr) {
    profile_->time("loss", backend_.stream(), loss);
  } else {
    loss();
  }
  if (sync) options_.gradient_sync->begin();
  model_.backward(result.dlogits, ctx);
  if (sync) {
    if (profile_ != nullptr) {
      profile_->time("gradient sync", backend_.stream(), [&] { options_.gradient_sync->finish(); });
    } else {
      options_.gradient_sync->finish();
    }
  }
  model_.release_activations();
  result.dlogits = {};
  if (++accumulated_ == options_.accumulation) {
    if (profile_ != nullptr) {
      profile_->time("optimizer step", backend_.stream(), [&] { finish_step(); });
    } else {
      finish_step();
    }
  }
  return result;
}

LossResult Trainer::scaled_loss(const Tensor& logits, const Tensor& labels, Context& ctx, float weight) {
  if (!scale_state_.defined()) return loss_->forward(logits, labels, ctx, loss_scale_ * weight);
  // As autocast: the loss in f32; its gradient scaled there, then rounded to the model's dtype.
  const bool narrow = logits.dtype() != DType::f32;
  Tensor wide = logits;
  if (narrow) {
    wide = backend_.empty(logits.shape(), DType::f32, logits.layout());
    backend_.cast(logits, wide);
  }
  LossResult result = loss_->forward(wide, labels, ctx, weight);
  backend_.multiply_by_loss_scale(result.dlogits, scale_state_);
  if (narrow) {
    Tensor rounded = backend_.empty(logits.shape(), logits.dtype(), logits.layout());
    backend_.cast(result.dlogits, rounded);
    result.dlogits = rounded;
  }
  return result;
}

void Trainer::finish_step() {
  accumulated_ = 0;
  const float lr = schedule_.at(step_++);
  // The gradients hold the sum of `accumulation` batch means (of every replica's), times the loss
  // scale: step with their unscaled mean.
  const float replicas = options_.gradient_sync != nullptr ? static_cast<float>(options_.gradient_sync->replicas()) : 1;
  const float mean = 1.0f / (static_cast<float>(options_.accumulation) * replicas);
  if (scale_state_.defined()) {
    // The overflow check, the skip and the scale's update, all enqueued: nothing waits.
    std::vector<Tensor> gradients;
    model_.for_each_parameter([&](const std::string&, Parameter& p) {
      if (p.grad.defined()) gradients.push_back(p.grad);
    });
    backend_.find_non_finite(gradients, scale_state_);
    optimizer_->step(lr, mean, scale_state_);
    const LossScaleOptions& s = options_.loss_scale;
    backend_.update_loss_scale(scale_state_, s.growth, s.backoff, s.growth_interval);
    if (step_ % kScaleCheckInterval == 0) check_loss_scale(device_scale_state()[LossScaleState::scale]);
    return;
  }
  if (options_.compute == DType::f16 && !host_scaled_step_is_finite()) return;
  optimizer_->step(lr, mean / loss_scale_);
  if (options_.compute == DType::f16 && ++good_steps_ == options_.loss_scale.growth_interval) {
    loss_scale_ *= options_.loss_scale.growth;
    good_steps_ = 0;
  }
}

bool Trainer::host_scaled_step_is_finite() {
  std::vector<Tensor> gradients;
  model_.for_each_parameter([&](const std::string&, Parameter& p) {
    if (p.grad.defined()) gradients.push_back(p.grad);
  });
  if (backend_.all_finite_in(gradients)) return true;
  // The scale overflowed f16 somewhere in backward: these gradients are garbage. Skip the step
  // (the schedule moves on, as with PyTorch's GradScaler) and retry with half the scale.
  optimizer_->zero_grad();
  ++skipped_steps_;
  good_steps_ = 0;
  loss_scale_ *= options_.loss_scale.backoff;
  check_loss_scale(loss_scale_);
  return false;
}

void Trainer::check_loss_scale(float scale) const {
  if (scale >= kSmallestLossScale) return;
  throw std::runtime_error("Trainer: the gradients are not finite even with the fp16 loss scale at " +
                           std::to_string(scale) + " (step " + std::to_string(step_) +
                           "): a NaN or infinity in the data, or a diverged model (lower the learning rate)");
}

LossResult Trainer::evaluate_batch(const Tensor& images, const Tensor& labels, Tensor* logits) {
  const Tensor x = prepare(images);
  Context ctx{.backend = backend_, .mode = Mode::eval, .seed = options_.seed, .step = 0};
  const Tensor out = model_.forward(x, ctx);
  if (logits != nullptr) *logits = out;
  return loss_->forward(out, labels, ctx);
}

Tensor Trainer::predict(const Tensor& images) {
  const Tensor x = prepare(images);
  Context ctx{.backend = backend_, .mode = Mode::eval, .seed = options_.seed, .step = 0};
  return model_.forward(x, ctx);
}

void Trainer::save(const std::filesystem::path& path) {
  const TrainingState state{.epoch = epoch_,
                            .step = step_,
                            .lr = schedule_.at(step_),
                            .loss_scale = loss_scale(),
                            .seed = options_.seed,
                            .extra = metadata_};
  save_checkpoint(path, model_, optimizer_.get(), state, backend_.stream());
}

void Trainer::load(const std::filesystem::path& path) {
  const TrainingState state = load_checkpoint(path, model_, optimizer_.get(), backend_.stream());
  step_ = state.step;
  epoch_ = state.epoch;
  metadata_ = state.extra;
  accumulated_ = 0;
  good_steps_ = 0;
  // A checkpoint of an f32 or bf16 run holds 1; an f16 run resumes at its scale.
  if (options_.compute == DType::f16) {
    const float scale = state.loss_scale > 0 && std::isfinite(state.loss_scale) ? static_cast<float>(state.loss_scale)
                                                                                : options_.loss_scale.initial;
    if (scale_state_.defined()) {
      std::vector<float> values = device_scale_state();
      values[LossScaleState::scale] = scale;
      values[LossScaleState::good_steps] = 0;
      values[LossScaleState::found_inf] = 0;
      scale_state_.copy_from(Tensor::from_values({LossScaleState::size}, values), backend_.stream());
    } else {
      loss_scale_ = scale;
    }
  }
  optimizer_->zero_grad();
}

}  // namespace stoke::nn
