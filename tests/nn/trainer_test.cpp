// The Trainer's choice of optimizer and loss: the default is SGD with softmax cross-entropy (the
// same steps as naming them explicitly), AdamW with binary cross-entropy learns multi-label
// targets and resumes from its checkpoint, and the options that contradict each other are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <stoke/nn/linear.hpp>
#include <stoke/nn/loss.hpp>
#include <stoke/nn/optimizer.hpp>
#include <stoke/nn/pooling.hpp>
#include <stoke/nn/safetensors.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>

#include "../gpu/expect_throw.hpp"
#include "compare.hpp"
#include "gradcheck.hpp"
#include "temp_folder.hpp"

namespace stoke::nn {
namespace {

namespace fs = std::filesystem;
using gpu::test::expect_throw_mentioning;
using testing::parameter_values;
using testing::random_tensor;

constexpr std::int64_t kBatch = 8;
constexpr std::int64_t kChannels = 3;

// Images {8, 3, 4, 4} -> mean per channel -> Linear(3, 3): small enough for many steps.
std::unique_ptr<Sequential> tiny_model() {
  auto model = std::make_unique<Sequential>();
  model->emplace<GlobalAvgPool>("pool");
  model->emplace<Linear>("fc", LinearOptions{.in_features = kChannels, .out_features = kChannels, .seed = 4});
  return model;
}

Tensor labels_of(std::int64_t n) {
  Tensor labels({n}, DType::i32);
  for (std::int64_t i = 0; i < n; ++i) labels.data_as<std::int32_t>()[i] = static_cast<std::int32_t>(i % kChannels);
  return labels;
}

// Multi-label targets that the model can learn: label c is on when channel c's mean is positive.
Tensor targets_of(const Tensor& images) {
  Tensor targets({images.dim(0), kChannels});
  const auto pixels = images.f32();
  const std::int64_t plane = images.dim(2) * images.dim(3);
  for (std::int64_t i = 0; i < images.dim(0); ++i) {
    for (std::int64_t c = 0; c < kChannels; ++c) {
      double sum = 0;
      for (std::int64_t p = 0; p < plane; ++p)
        sum += static_cast<double>(pixels[static_cast<std::size_t>((i * kChannels + c) * plane + p)]);
      targets.f32()[static_cast<std::size_t>(i * kChannels + c)] = sum > 0 ? 1.0f : 0.0f;
    }
  }
  return targets;
}

const LrScheduleOptions constant_lr{.kind = LrScheduleKind::constant, .base_lr = 0.05f};

TEST(Trainer, DefaultsToSgdAndSoftmaxCrossEntropy) {
  const std::unique_ptr<Backend> backend = make_backend(Device::cpu());
  auto implicit_model = tiny_model();
  auto explicit_model = tiny_model();
  const SgdOptions sgd{.momentum = 0.9f, .weight_decay = 1e-3f, .nesterov = true};
  Trainer implicit(*implicit_model, *backend, {.sgd = sgd, .schedule = constant_lr, .label_smoothing = 0.1f});
  Trainer named(*explicit_model, *backend,
                {.schedule = constant_lr,
                 .optimizer = Sgd::factory(sgd),
                 .loss = std::make_shared<SoftmaxCrossEntropy>(SoftmaxCrossEntropyOptions{.label_smoothing = 0.1f})});
  EXPECT_EQ(implicit.optimizer().name(), "sgd");
  EXPECT_EQ(implicit.loss().name(), "SoftmaxCrossEntropy");
  const Tensor images = random_tensor({kBatch, kChannels, 4, 4}, 11);
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(implicit.train_batch(images, labels_of(kBatch)).read().loss,
              named.train_batch(images, labels_of(kBatch)).read().loss);
  }
  EXPECT_EQ(parameter_values(*implicit_model), parameter_values(*explicit_model));
}

class TrainerFiles : public testing::TempFolderTest {};

TEST_F(TrainerFiles, AdamWWithBinaryCrossEntropyLearnsMultiLabelTargetsAndResumes) {
  const std::unique_ptr<Backend> backend = make_backend(Device::cpu());
  const TrainerOptions options{.schedule = {.kind = LrScheduleKind::constant, .base_lr = 0.2f},
                               .optimizer = AdamW::factory({.weight_decay = 0.01f}),
                               .loss = std::make_shared<BinaryCrossEntropyWithLogits>()};
  auto model = tiny_model();
  Trainer trainer(*model, *backend, options);
  EXPECT_EQ(trainer.optimizer().name(), "adamw");
  const Tensor images = random_tensor({kBatch, kChannels, 4, 4}, 12);
  const Tensor targets = targets_of(images);
  const LossStats first = trainer.train_batch(images, targets).read();
  LossStats last = first;
  for (int step = 1; step < 100; ++step) last = trainer.train_batch(images, targets).read();
  EXPECT_LT(last.loss, 0.5 * first.loss);
  EXPECT_EQ(trainer.evaluate_batch(images, targets).read().correct, kBatch) << "every row's labels right";

  const fs::path path = dir_ / "adamw.safetensors";
  trainer.save(path);
  EXPECT_EQ(read_safetensors(path).metadata.at("stoke.optimizer"), "adamw");
  auto resumed_model = tiny_model();
  Trainer resumed(*resumed_model, *backend, options);
  resumed.load(path);
  EXPECT_EQ(resumed.step(), 100);
  EXPECT_EQ(resumed.train_batch(images, targets).read().loss, trainer.train_batch(images, targets).read().loss);
  EXPECT_EQ(parameter_values(*resumed_model), parameter_values(*model));

  // An SGD trainer cannot resume from AdamW's state.
  auto sgd_model = tiny_model();
  Trainer sgd(*sgd_model, *backend, {.schedule = constant_lr});
  expect_throw_mentioning<std::runtime_error>([&] { sgd.load(path); }, "its optimizer state is adamw's");
}

TEST(Trainer, RefusesContradictoryOptions) {
  const std::unique_ptr<Backend> backend = make_backend(Device::cpu());
  auto model = tiny_model();
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        Trainer t(*model, *backend,
                  {.schedule = constant_lr,
                   .label_smoothing = 0.1f,
                   .loss = std::make_shared<BinaryCrossEntropyWithLogits>()});
      },
      "label_smoothing is 0.100000 but a loss is given (BinaryCrossEntropyWithLogits)");
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        Trainer t(*model, *backend, {.schedule = constant_lr, .optimizer = [](Layer&, Backend&) {
                                       return std::unique_ptr<Optimizer>();
                                     }});
      },
      "the optimizer factory returned no optimizer");
  // The loss checks its own targets: class labels for softmax cross-entropy are not multi-label ones.
  Trainer softmax(*model, *backend, {.schedule = constant_lr});
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)softmax.train_batch(random_tensor({2, kChannels, 4, 4}, 1), Tensor({2, kChannels}));
      },
      "SoftmaxCrossEntropy: the labels are f32[2, 3]");
}

}  // namespace
}  // namespace stoke::nn
