// Trainer: the training loop's body for one model on one backend -- forward, loss, backward, and
// an optimizer step every `accumulation` batches with the learning rate of the schedule -- plus
// evaluation and checkpoints of the whole training state.
//
//   auto backend = make_backend(Device::cpu());
//   auto model = make_model("small_cnn", {.classes = 10});
//   Trainer trainer(*model, *backend, {.schedule = {.base_lr = 0.1f, .total_steps = 1000}});
//   for (...) LossStats s = trainer.train_batch(images, labels).read();
//   trainer.save("run/last.safetensors");
//
// The optimizer and the loss are SGD and softmax cross-entropy unless the options name others:
//
//   Trainer multi_label(*model, *backend, {.schedule = {...},
//                                          .optimizer = AdamW::factory({.weight_decay = 0.05f}),
//                                          .loss = std::make_shared<BinaryCrossEntropyWithLogits>()});
//
// Mixed precision (CUDA): with .compute = DType::bf16 or f16 the images are cast to that dtype and
// the model computes in it, its f32 master weights cast per step (layer.hpp). f16's narrow range
// needs dynamic loss scaling, as PyTorch's GradScaler: the loss gradient is multiplied by a scale
// so small gradients do not flush to zero; a step whose gradients overflow is skipped and the
// scale halved; after growth_interval good steps in a row the scale doubles. With an optimizer that
// can skip a step on the device (Sgd, the default) the scale and the overflow check stay on the
// device, as PyTorch's GradScaler keeps them: the loss is computed in f32, its gradient scaled there
// and then rounded to f16, and no step waits for the GPU (loss_scale() and skipped_steps() do,
// when asked). With AdamW the overflow check reads one flag per step. For channels-last,
// feed NHWC images to a model rearranged with model.to_layout(TensorLayout::nhwc).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoke/nn/backend.hpp"
#include "stoke/nn/checkpoint.hpp"
#include "stoke/nn/layer.hpp"
#include "stoke/nn/loss.hpp"
#include "stoke/nn/lr_schedule.hpp"
#include "stoke/nn/optimizer.hpp"
#include "stoke/nn/replicas.hpp"

namespace stoke::nn {

/// fp16's dynamic loss scaling (PyTorch's GradScaler defaults).
struct LossScaleOptions {
  float initial = 65536.0f;    ///< 2^16
  int growth_interval = 2000;  ///< good steps in a row before the scale grows
  float growth = 2.0f;
  float backoff = 0.5f;  ///< the scale's factor after an overflow
};

struct TrainerOptions {
  /// The default optimizer's options (unused when `optimizer` is set).
  SgdOptions sgd{};
  LrScheduleOptions schedule{};
  /// The default loss's label smoothing (must stay 0 when `loss` is set: give it to that loss).
  float label_smoothing = 0;
  /// Batches whose gradients are summed before each optimizer step (the step then uses their
  /// mean): an effective batch of accumulation x the batch size.
  int accumulation = 1;
  /// Dropout masks (with the step) come from this seed.
  std::uint64_t seed = 0;
  /// What the model computes in: f32, or bf16 / f16 with f32 master weights (CUDA only).
  DType compute = DType::f32;
  /// Used with compute == f16 only.
  LossScaleOptions loss_scale{};
  /// Builds the optimizer over the model (Sgd::factory, AdamW::factory, or one's own); empty: an
  /// Sgd with `sgd` above.
  OptimizerFactory optimizer{};
  /// The loss, whose targets train_batch() takes (stateless: it may be shared); null: a
  /// SoftmaxCrossEntropy with `label_smoothing` above.
  std::shared_ptr<const Loss> loss{};
  /// Data-parallel training (replicas.hpp, stoke::dist): sums the gradients of each step's last
  /// batch over the replicas while its backward runs (not on the accumulation micro-steps before
  /// it: their gradients are summed locally first), and the step uses the mean over all the
  /// replicas' batches. Null: this replica alone. Must outlive the trainer.
  GradientSync* gradient_sync = nullptr;
  /// Sync batch norm: batch statistics over all the replicas' batches. Null: each replica's own.
  ReplicaSum* batch_norm_sync = nullptr;
};

class Trainer {
 public:
  /// The model's parameters must be on the backend's device. Throws std::invalid_argument for
  /// accumulation < 1, a label smoothing given with a loss of one's own, an optimizer factory that
  /// returns null, and what the optimizer, the loss and LrSchedule throw for their options.
  Trainer(Layer& model, Backend& backend, const TrainerOptions& options);

  /// Trains on one batch: images {N, C, H, W} and the loss's targets (labels {N} i32 for softmax
  /// cross-entropy, f32 {N, K} for binary cross-entropy), both on the backend's device; images in
  /// another floating-point dtype than options.compute are cast to it. Throws
  /// std::invalid_argument when the backend cannot compute in that dtype and the images' layout.
  /// The returned stats are on the device (read() them when needed: reading waits for the GPU).
  LossResult train_batch(const Tensor& images, const Tensor& labels);
  /// A data-parallel replica whose share of an epoch ran short (files skipped) takes part in the
  /// others' step without a batch of its own: `images` and `labels` of a batch's shape (zeros do)
  /// go through forward and backward with the loss's gradient multiplied by 0, so the step's
  /// collectives all happen and the gradients this replica adds are zero (PyTorch's Join does the
  /// same); the step then moves every replica's model alike.
  LossResult stand_in_batch(const Tensor& images, const Tensor& labels);
  /// The loss and correct count of one batch in Mode::eval (nothing kept, no gradients). With
  /// `logits`, also the model's output {N, classes} (on the device, in the compute dtype), for
  /// top-k accuracy or predictions.
  LossResult evaluate_batch(const Tensor& images, const Tensor& labels, Tensor* logits = nullptr);
  /// The model's output {N, classes} for a batch in Mode::eval, without labels.
  Tensor predict(const Tensor& images);

  /// Optimizer steps taken (each after `accumulation` batches), the skipped ones included.
  std::int64_t step() const noexcept { return step_; }
  /// Steps skipped because a gradient overflowed (f16 only). Waits for the GPU when the scale is
  /// kept there.
  std::int64_t skipped_steps() const;
  /// The loss scale the next batches use (1 unless compute is f16). Waits for the GPU when the
  /// scale is kept there.
  float loss_scale() const;
  /// The learning rate the next optimizer step uses.
  float lr() const { return schedule_.at(step_); }
  std::int64_t epoch() const noexcept { return epoch_; }
  void set_epoch(std::int64_t epoch) noexcept { epoch_ = epoch; }

  /// Free-form entries saved with every checkpoint (TrainingState::extra: the model's name, the
  /// class names, ...) and restored by load().
  void set_metadata(std::map<std::string, std::string> metadata) { metadata_ = std::move(metadata); }
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }

  /// Times every layer, the loss and the optimizer step of the batches trained from now on into
  /// `profile` (layer_profile.hpp; it synchronizes the GPU around each, so steps get slower);
  /// null stops it. The profile must outlive its use.
  void set_profile(LayerProfile* profile) noexcept { profile_ = profile; }

  /// The model, the optimizer's state and the training state (epoch, step, lr, loss scale, seed,
  /// metadata), written atomically (checkpoint.hpp).
  void save(const std::filesystem::path& path);
  /// Restores what save() wrote; throws (naming every mismatch) when the checkpoint is not of
  /// this model. A partially accumulated batch group is dropped.
  void load(const std::filesystem::path& path);

  const TrainerOptions& options() const noexcept { return options_; }
  Layer& model() noexcept { return model_; }
  Backend& backend() noexcept { return backend_; }
  Optimizer& optimizer() noexcept { return *optimizer_; }
  const Loss& loss() const noexcept { return *loss_; }

 private:
  /// `images` in the compute dtype, checked against what the backend supports.
  Tensor prepare(const Tensor& images);
  /// train_batch with the loss's gradient multiplied by `weight` (1, or 0 for a stand-in batch).
  LossResult train(const Tensor& images, const Tensor& labels, float weight);
  /// The loss of `logits` with its gradient times `weight` and the loss scale: on the device
  /// scaler's path in f32, the gradient rounded to the logits' dtype after scaling.
  LossResult scaled_loss(const Tensor& logits, const Tensor& labels, Context& ctx, float weight);
  /// The optimizer step after `accumulation` batches; with f16, the overflow check and the scale.
  void finish_step();
  /// finish_step's f16 step with the scaler on the host: one wait for the overflow check.
  bool host_scaled_step_is_finite();
  /// Throws when the scale fell below the smallest that can still be what overflows.
  void check_loss_scale(float scale) const;
  /// The scaler's state on the host (f16 with the device scaler only; waits for the GPU).
  std::vector<float> device_scale_state() const;

  Layer& model_;
  Backend& backend_;
  TrainerOptions options_;
  std::unique_ptr<Optimizer> optimizer_;
  LrSchedule schedule_;
  std::shared_ptr<const Loss> loss_;
  std::int64_t step_ = 0;
  std::int64_t epoch_ = 0;
  int accumulated_ = 0;  // batches whose gradients are summed and not yet stepped
  // The f16 loss scaler: on the host (loss_scale_, good_steps_, skipped_steps_), or on the device
  // (scale_state_ defined, a LossScaleState; loss_scale_ then stays 1).
  float loss_scale_ = 1;
  int good_steps_ = 0;  // steps without overflow since the scale last changed (f16)
  std::int64_t skipped_steps_ = 0;
  Tensor scale_state_;
  std::map<std::string, std::string> metadata_;
  LayerProfile* profile_ = nullptr;
};

}  // namespace stoke::nn
