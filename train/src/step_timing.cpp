#include "stoke/train/step_timing.hpp"

#include <chrono>
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

StepTiming time_train_steps(nn::Trainer& trainer, nn::Backend& backend, const BatchTensors& batch,
                            const StepTimingOptions& options) {
  if (options.steps <= 0 && options.seconds <= 0) {
    throw std::invalid_argument("time_train_steps: set a number of steps or seconds");
  }
  for (int i = 0; i < options.warmup; ++i) (void)trainer.train_batch(batch.images, batch.labels);
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

}  // namespace stoke::train
