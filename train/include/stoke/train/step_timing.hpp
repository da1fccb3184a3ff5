// Training steps timed two ways: on a synthetic batch already on the device (the training step
// with no input pipeline at all: the compute bound) and fed by the whole pipeline. `stoke bench
// nn` reports the first; `stoke bench train` measures the second against it.
#pragma once

#include <cstdint>
#include <stoke/gpu/convert.hpp>
#include <stoke/gpu/dtype.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/trainer.hpp>
#include <stoke/nodes/dataset.hpp>
#include <string>
#include <vector>

#include "stoke/train/epoch.hpp"
#include "stoke/train/input.hpp"

namespace stoke::train {

/// Random images {batch, 3, size, size} with values in [-2, 2) (like normalized ones), in `dtype`
/// and `layout`, and labels in [0, classes), both on the backend's device. Deterministic.
BatchTensors synthetic_batch(nn::Backend& backend, int batch, int size, int classes, gpu::DType dtype = gpu::DType::f32,
                             gpu::TensorLayout layout = gpu::TensorLayout::nchw);

/// Random uint8 pixels {batch, 3, size, size} in NHWC memory order on the backend's device: a batch
/// as it crosses to the device, for StepTimingOptions::convert_from. Deterministic.
nn::Tensor synthetic_pixels(nn::Backend& backend, int batch, int size);

/// How long time_train_steps runs. At least one of `steps` and `seconds` must be set.
struct StepTimingOptions {
  int warmup = 3;          ///< untimed steps first
  std::int64_t steps = 0;  ///< timed steps (0: no limit)
  double seconds = 0;      ///< timed steps until this much time has passed (0: no limit)
  /// Read the loss after every step, so that a GPU finishes each step before the next is queued,
  /// as in run_epoch's batch step; otherwise it is read after the last step only, and GPU steps
  /// queue up. The CPU backend computes synchronously and its loss is read every step either way.
  bool read_loss_every_step = false;
  /// Time the compute stage's conversion too, as run_epoch's compute stage does it: before each
  /// step, `convert_from` (uint8 NHWC, synthetic_pixels) is converted with `convert` into the
  /// batch's images (of the same shape, in convert's dtype and layout). Undefined: the images are
  /// stepped on as they are.
  nn::Tensor convert_from{};
  gpu::ConvertOptions convert{};
};

/// What time_train_steps measured: the timed steps only.
struct StepTiming {
  std::int64_t steps = 0;
  std::int64_t images = 0;
  double seconds = 0;           ///< from the first timed step to the last one's end (device included)
  std::vector<double> step_ms;  ///< the host's time in each step (on a GPU without per-step reads: queueing)
  double last_loss = 0;
  double images_per_sec() const { return seconds > 0 ? static_cast<double>(images) / seconds : 0; }
};

/// Runs trainer.train_batch on `batch` over and over: options.warmup untimed steps, then timed
/// ones until options.steps or options.seconds is reached. Throws std::invalid_argument when
/// neither limit is set.
StepTiming time_train_steps(nn::Trainer& trainer, nn::Backend& backend, const BatchTensors& batch,
                            const StepTimingOptions& options);

/// How long time_pipeline_steps runs.
struct PipelineTimingOptions {
  std::int64_t warmup_batches = 10;  ///< stepped first, not counted
  double seconds = 10;               ///< counted time after the warmup; > 0
  /// The images/s the step alone reaches (time_train_steps), to bound the data: the dataset is
  /// repeated up to twice what that rate would take in `seconds`, so that a dataset whose every
  /// file fails ends rather than spinning. 0: the data once.
  double compute_bound = 0;
};

/// Runs trainer.train_batch on the batches of `input` over `dataset` through the whole pipeline
/// (read -> decode + augment -> batch -> to-device -> a sink stage "train", the autotuner's target):
/// run_epoch's measurement window. Throws std::runtime_error naming `source` (the dataset's path)
/// and the first skipped file when no batch came after the warmup.
EpochTotals time_pipeline_steps(nn::Trainer& trainer, const nodes::DatasetPtr& dataset, InputConfig input,
                                const PipelineTimingOptions& options, const std::string& source);

}  // namespace stoke::train
