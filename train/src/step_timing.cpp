#include "stoke/train/step_timing.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <stoke/nodes/random.hpp>

namespace stoke::train {

using Clock = std::chrono::steady_clock;

BatchTensors synthetic_batch(nn::Backend& backend, int batch, int size, int classes, gpu::DType dtype,
                             gpu::TensorLayout layout) {
  nn::Tensor images({batch, 3, size, size});
  nn::Tensor labels({batch}, gpu::DType::i32);
  nodes::ItemRng rng(1, 0, 0);
  for (float& v : images.f32()) v = static_cast<float>(rng.uniform(-2, 2));
  for (std::int64_t i = 0; i < batch; ++i) {
    labels.data_as<std::int32_t>()[i] = static_cast<std::int32_t>(rng.uniform_int(0, classes - 1));
  }
  if (layout != images.layout()) images = nn::to_layout(images, layout);
  const nn::Tensor on_device = images.to(backend.device(), backend.stream());
  nn::Tensor converted = backend.empty(on_device.shape(), dtype, on_device.layout());
  backend.cast(on_device, converted);
  BatchTensors out{converted, labels.to(backend.device(), backend.stream()), {}};
  backend.stream().synchronize();
  return out;
}

nn::Tensor synthetic_pixels(nn::Backend& backend, int batch, int size) {
  nn::Tensor pixels({batch, 3, size, size}, gpu::DType::u8, gpu::Device::cpu(), gpu::TensorLayout::nhwc);
  nodes::ItemRng rng(2, 0, 0);
  auto* bytes = pixels.data_as<std::uint8_t>();
  for (std::int64_t i = 0; i < pixels.numel(); ++i) bytes[i] = static_cast<std::uint8_t>(rng.uniform_int(0, 255));
  nn::Tensor on_device = pixels.to(backend.device(), backend.stream());
  backend.stream().synchronize();
  return on_device;
}

StepTiming time_train_steps(nn::Trainer& trainer, nn::Backend& backend, const BatchTensors& batch,
                            const StepTimingOptions& options) {
  if (options.steps <= 0 && options.seconds <= 0) {
    throw std::invalid_argument("time_train_steps: set a number of steps or seconds");
  }
  const nn::Tensor& raw = options.convert_from;
  if (raw.defined() &&
      (raw.dtype() != gpu::DType::u8 || raw.shape() != batch.images.shape() ||
       batch.images.dtype() != options.convert.dtype || batch.images.layout() != options.convert.layout)) {
    throw std::invalid_argument("time_train_steps: convert_from must be uint8 pixels of the images' shape (" +
                                nn::to_string(batch.images.shape()) + "), and the images (" + batch.images.describe() +
                                ") in the convert options' dtype and layout");
  }
  const auto convert = [&] {
    if (!raw.defined()) return;
    gpu::convert_u8(static_cast<const std::uint8_t*>(raw.data()), batch.images.data(),
                    static_cast<std::size_t>(raw.dim(0)), static_cast<int>(raw.dim(2)), static_cast<int>(raw.dim(3)),
                    static_cast<int>(raw.dim(1)), options.convert, backend.stream());
  };
  for (int i = 0; i < options.warmup; ++i) {
    convert();
    (void)trainer.train_batch(batch.images, batch.labels);
  }
  backend.stream().synchronize();
  const bool read_every_step = options.read_loss_every_step || backend.device().is_cpu();
  const auto time_is_up = [&](Clock::time_point start, std::int64_t steps) {
    if (options.steps > 0 && steps >= options.steps) return true;
    return options.seconds > 0 && std::chrono::duration<double>(Clock::now() - start).count() >= options.seconds;
  };
  StepTiming timing;
  const auto start = Clock::now();
  nn::LossResult last;
  do {
    const auto t0 = Clock::now();
    convert();
    last = trainer.train_batch(batch.images, batch.labels);
    if (read_every_step) timing.last_loss = last.read(backend.stream()).loss;
    timing.step_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    ++timing.steps;
  } while (!time_is_up(start, timing.steps));
  if (!read_every_step) timing.last_loss = last.read(backend.stream()).loss;
  backend.stream().synchronize();
  timing.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  timing.images = timing.steps * batch.labels.numel();
  return timing;
}

EpochTotals time_pipeline_steps(nn::Trainer& trainer, const nodes::DatasetPtr& dataset, InputConfig input,
                                const PipelineTimingOptions& options, const std::string& source) {
  if (!(options.seconds > 0)) throw std::invalid_argument("time_pipeline_steps: seconds must be more than 0");
  // The pipeline cannot outrun the compute bound: twice the images it would take is enough.
  const double enough = 2 * options.compute_bound * options.seconds +
                        static_cast<double>(options.warmup_batches + 2) * static_cast<double>(input.batch_size);
  input.epochs = static_cast<std::uint32_t>(
      std::min(1e6, std::ceil(enough / static_cast<double>(std::max<std::size_t>(1, dataset->size()))) + 1));
  input.tuning.target = "train";
  input.drop_last = true;
  const EpochTotals totals =
      run_epoch(dataset, input, trainer.backend(),
                [&](const BatchTensors& t) { return StepResult{.loss = trainer.train_batch(t.images, t.labels)}; },
                {.stage = "train",
                 .progress = {},
                 .window = {.warmup_batches = options.warmup_batches, .seconds = options.seconds}});
  if (totals.images == 0 || totals.seconds <= 0) {
    std::string why = std::to_string(totals.skipped) + " items skipped";
    if (!totals.skipped_files.empty()) {
      why += "; the first: " + totals.skipped_files[0].file + ": " + totals.skipped_files[0].reason;
    }
    throw std::runtime_error("the pipeline delivered no batches after the " + std::to_string(options.warmup_batches) +
                             " warmup ones from " + source + " (" + why + ")");
  }
  return totals;
}

}  // namespace stoke::train
