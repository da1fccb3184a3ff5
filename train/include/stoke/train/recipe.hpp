// Recipe: how `stoke train` trains, as one value -- the model, the optimizer and its schedule, the
// input pipeline -- and what it turns into: the model on a device, nn::TrainerOptions and
// FitOptions. The defaults are the command's.
//
//   Recipe recipe{.epochs = 30, .batch = 128};
//   auto model = make_model(recipe, classes, backend);
//   nn::Trainer trainer(*model, backend, trainer_options(recipe, data.train->size()));
//   const FitResult result = fit(trainer, data.train, data.val, fit_options(recipe, data.train->classes()));
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stoke/graph/options.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/lr_schedule.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>
#include <utility>
#include <vector>

#include "stoke/train/compute.hpp"
#include "stoke/train/fit.hpp"

namespace stoke::train {

struct Recipe {
  std::string model = "small_cnn";  ///< a name of nn::model_catalog()
  int epochs = 10;
  int batch = 64;  ///< images per batch
  int size = 0;    ///< image side in pixels; 0: default_image_size(model)
  /// Training transform specs, ending with normalize. Empty: default_train_transforms (random
  /// crops, or for `builtin_data` none).
  std::vector<std::string> transforms{};
  bool builtin_data = false;  ///< the built-in shapes dataset, whose images are already framed
  float lr = 0.05f;           ///< after the warmup
  nn::LrScheduleKind schedule = nn::LrScheduleKind::cosine;
  double warmup = 1;           ///< epochs of linear warmup from 0
  float momentum = 0.9f;       ///< SGD momentum, Nesterov when > 0
  float weight_decay = 5e-4f;  ///< on weights, not biases or batch norm
  float label_smoothing = 0.05f;
  int accumulate = 1;                              ///< batches per optimizer step
  gpu::DType precision = gpu::DType::f32;          ///< bf16 / f16: mixed precision (CUDA)
  /// The layout the model computes in (compute_layout): auto is NHWC for bf16 / f16 on CUDA.
  ChannelsLast channels_last = ChannelsLast::automatic;
  std::uint64_t seed = 0;                          ///< initial weights, shuffling, augmentation, dropout
  int threads = 0;                                 ///< input threads (0: the scheduler's choice)
  bool autotune = true;                            ///< the scheduler moves the input stages' threads
  graph::OnError on_error = graph::OnError::skip;  ///< an unreadable image: skip it, or fail the run
  /// A pipeline call running longer than this (a hung read, a plugin that never returns) is
  /// reported with its stage and file, or fails the run (graph::StallOptions). 0: not watched.
  std::chrono::milliseconds stall_limit{0};
  graph::OnStall on_stall = graph::OnStall::warn;
  /// How images are decoded: 8-bit RGB, or what the files hold (grayscale as 1 channel, 16-bit
  /// and DICOM values kept); the model's input channels follow the data.
  nodes::DecodeColor color = nodes::DecodeColor::rgb;

  /// `size`, or the model's default when 0.
  int image_size() const;
};

/// The recipe's model for `classes` classes, its initial weights from the seed, on `backend`'s
/// device in the recipe's layout (compute_layout). Throws std::invalid_argument for an unknown
/// model name (listing the known ones), or a precision and layout the backend cannot compute in.
std::unique_ptr<nn::Sequential> make_model(const Recipe& recipe, int classes, nn::Backend& backend, int channels = 3);

/// SGD (Nesterov momentum, weight decay) with the recipe's schedule over its epochs of
/// `train_images` images (epoch_schedule), label smoothing, accumulation, seed and precision.
nn::TrainerOptions trainer_options(const Recipe& recipe, std::size_t train_images);

/// The recipe as rows of a settings table (the report's, see FitRecording): precision, epochs,
/// batch, image size, learning rate, input threads, autotune, seed, channels-last.
std::vector<std::pair<std::string, std::string>> settings_of(const Recipe& recipe);

/// The training input of the recipe: batch, size, transforms, threads, scheduler, error policy.
InputConfig training_input(const Recipe& recipe);

/// The recipe's epochs and seed, its training input (batch, size, transforms, threads, scheduler,
/// error policy) and the matching evaluation input (default_eval_transforms), and the model card
/// of `classes` and `channels` input channels as checkpoint metadata, so that `stoke classify`
/// and `stoke evaluate` can use the checkpoints.
FitOptions fit_options(const Recipe& recipe, const std::vector<std::string>& classes, int channels = 3);

}  // namespace stoke::train
