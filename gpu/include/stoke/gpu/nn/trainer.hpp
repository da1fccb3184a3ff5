// Trainer: the training loop's body for one model on one backend -- forward, loss, backward, and
// an SGD step every `accumulation` batches with the learning rate of the schedule -- plus
// evaluation and checkpoints of the whole training state.
//
//   auto backend = make_backend(Device::cpu());
//   auto model = make_model("small_cnn", {.classes = 10});
//   Trainer trainer(*model, *backend, {.schedule = {.base_lr = 0.1f, .total_steps = 1000}});
//   for (...) LossStats s = trainer.train_batch(images, labels).read();
//   trainer.save("run/last.safetensors");
#pragma once

#include <cstdint>
#include <filesystem>

#include "stoke/gpu/nn/backend.hpp"
#include "stoke/gpu/nn/checkpoint.hpp"
#include "stoke/gpu/nn/layer.hpp"
#include "stoke/gpu/nn/loss.hpp"
#include "stoke/gpu/nn/lr_schedule.hpp"
#include "stoke/gpu/nn/optimizer.hpp"

namespace stoke::gpu::nn {

struct TrainerOptions {
  SgdOptions sgd{};
  LrScheduleOptions schedule{};
  float label_smoothing = 0;
  /// Batches whose gradients are summed before each optimizer step (the step then uses their
  /// mean): an effective batch of accumulation x the batch size.
  int accumulation = 1;
  /// Dropout masks (with the step) come from this seed.
  std::uint64_t seed = 0;
};

class Trainer {
 public:
  /// The model's parameters must be on the backend's device. Throws std::invalid_argument for
  /// accumulation < 1 and what Sgd and LrSchedule throw for their options.
  Trainer(Layer& model, Backend& backend, const TrainerOptions& options);

  /// Trains on one batch: images {N, C, H, W} and labels {N} (i32), both on the backend's device.
  /// The returned stats are on the device (read() them when needed: reading waits for the GPU).
  LossResult train_batch(const Tensor& images, const Tensor& labels);
  /// The loss and correct count of one batch in Mode::eval (nothing kept, no gradients).
  LossResult evaluate_batch(const Tensor& images, const Tensor& labels);

  /// Optimizer steps taken (each after `accumulation` batches).
  std::int64_t step() const noexcept { return step_; }
  /// The learning rate the next optimizer step uses.
  float lr() const { return schedule_.at(step_); }
  std::int64_t epoch() const noexcept { return epoch_; }
  void set_epoch(std::int64_t epoch) noexcept { epoch_ = epoch; }

  /// The model, the optimizer's state and the training state (epoch, step, lr, seed), written
  /// atomically.
  void save(const std::filesystem::path& path);
  /// Restores what save() wrote; throws (naming every mismatch) when the checkpoint is not of
  /// this model. A partially accumulated batch group is dropped.
  void load(const std::filesystem::path& path);

  Layer& model() noexcept { return model_; }
  Backend& backend() noexcept { return backend_; }
  Sgd& optimizer() noexcept { return optimizer_; }

 private:
  Layer& model_;
  Backend& backend_;
  TrainerOptions options_;
  Sgd optimizer_;
  LrSchedule schedule_;
  SoftmaxCrossEntropy loss_;
  std::int64_t step_ = 0;
  std::int64_t epoch_ = 0;
  int accumulated_ = 0;  // batches whose gradients are summed and not yet stepped
};

}  // namespace stoke::gpu::nn
