// Recipe (stoke/train/recipe.hpp): what `stoke train`'s settings turn into -- the trainer's
// optimizer and schedule, the two inputs, the model card and the report's settings rows.
#include "stoke/train/recipe.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/models.hpp>
#include <string>
#include <vector>

#include "stoke/train/builtin.hpp"
#include "stoke/train/evaluate.hpp"
#include "stoke/train/model_card.hpp"
#include "train_test_support.hpp"

namespace stoke::train {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::Pair;

TEST(Recipe, TheImageSizeDefaultsToTheModels) {
  EXPECT_EQ(Recipe{}.image_size(), 32);  // small_cnn
  EXPECT_EQ(Recipe{.model = "resnet18"}.image_size(), 224);
  EXPECT_EQ((Recipe{.model = "resnet18", .size = 96}.image_size()), 96);
}

TEST(Recipe, TrainerOptionsFollowTheEpochsAndTheBatch) {
  const Recipe recipe{
      .epochs = 4, .batch = 10, .lr = 0.2f, .warmup = 0.5, .momentum = 0.8f, .accumulate = 2, .seed = 9};
  const nn::TrainerOptions options = trainer_options(recipe, 105);  // 10 whole batches: 5 steps per epoch
  EXPECT_FLOAT_EQ(options.sgd.momentum, 0.8f);
  EXPECT_TRUE(options.sgd.nesterov);
  EXPECT_EQ(options.schedule.kind, nn::LrScheduleKind::cosine);
  EXPECT_FLOAT_EQ(options.schedule.base_lr, 0.2f);
  EXPECT_EQ(options.schedule.total_steps, 20);
  EXPECT_EQ(options.schedule.warmup_steps, 2);
  EXPECT_EQ(options.accumulation, 2);
  EXPECT_EQ(options.seed, 9u);
  EXPECT_FALSE(trainer_options({.momentum = 0}, 100).sgd.nesterov);  // plain SGD: no Nesterov
}

TEST(Recipe, FitOptionsCarryBothInputsAndTheModelCard) {
  const Recipe recipe{.epochs = 3,
                      .batch = 16,
                      .size = 48,
                      .builtin_data = true,
                      .seed = 4,
                      .threads = 2,
                      .autotune = false,
                      .on_error = graph::OnError::fail};
  const FitOptions options = fit_options(recipe, {"cat", "dog"});
  EXPECT_EQ(options.epochs, 3);
  EXPECT_EQ(options.seed, 4u);
  EXPECT_EQ(options.train_input.batch_size, 16u);
  EXPECT_EQ(options.train_input.size, 48);
  EXPECT_EQ(options.train_input.transforms, default_train_transforms(48, true));
  EXPECT_EQ(options.train_input.threads, 2);
  EXPECT_FALSE(options.train_input.autotune);
  EXPECT_EQ(options.train_input.on_error, graph::OnError::fail);
  EXPECT_EQ(options.val_input.transforms, default_eval_transforms(48));
  EXPECT_FALSE(options.val_input.shuffle);
  const ModelCard card = model_card_from(options.metadata, "test");
  EXPECT_EQ(card.model, "small_cnn");
  EXPECT_EQ(card.image_size, 48);
  EXPECT_THAT(card.classes, ElementsAre("cat", "dog"));
  EXPECT_EQ(card.eval_transforms, default_eval_transforms(48));
  // Transforms given are used as they are.
  const std::vector<std::string> mine = {"resize size=48", "normalize"};
  EXPECT_EQ(fit_options({.size = 48, .transforms = mine}, {"a", "b"}).train_input.transforms, mine);
}

TEST(Recipe, SettingsRowsDescribeIt) {
  const auto rows = settings_of({.epochs = 6, .batch = 64, .lr = 0.05f, .warmup = 1, .accumulate = 2});
  EXPECT_THAT(rows, Contains(Pair("precision", "fp32")));
  EXPECT_THAT(rows, Contains(Pair("batch", "64 x 2 accumulated")));
  EXPECT_THAT(rows, Contains(Pair("learning rate", "0.05, cosine, warmup 1 epochs")));
  EXPECT_THAT(rows, Contains(Pair("input threads", "the scheduler's choice")));
}

TEST(Recipe, MakeModelPutsTheModelOnTheBackendsDevice) {
  const auto backend = nn::make_backend(gpu::Device::cpu());
  const auto a = make_model({.seed = 1}, 3, *backend);
  const auto b = make_model({.seed = 1}, 3, *backend);
  ASSERT_NE(a, nullptr);
  EXPECT_GT(nn::parameter_count(*a), 0);
  EXPECT_EQ(nn::parameter_count(*a), nn::parameter_count(*b));
  EXPECT_THROW(make_model({.model = "no_such_model"}, 3, *backend), std::invalid_argument);
}

TEST(Recipe, ChannelsLastNamesAndLayouts) {
  EXPECT_EQ(parse_channels_last("auto"), ChannelsLast::automatic);
  EXPECT_EQ(to_string(parse_channels_last("on")), "on");
  EXPECT_EQ(to_string(parse_channels_last("off")), "off");
  try {
    (void)parse_channels_last("yes");
    ADD_FAILURE() << "'yes' was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("auto, on or off"));
  }
  const auto cpu = nn::make_backend(gpu::Device::cpu());
  EXPECT_EQ(compute_layout(ChannelsLast::automatic, *cpu, gpu::DType::f32), gpu::TensorLayout::nchw);
  EXPECT_EQ(compute_layout(ChannelsLast::on, *cpu, gpu::DType::f32), gpu::TensorLayout::nhwc);
  try {
    (void)compute_layout(ChannelsLast::on, *cpu, gpu::DType::bf16);
    ADD_FAILURE() << "bf16 on the CPU was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("needs a CUDA device"));
  }
  EXPECT_THAT(settings_of({.channels_last = ChannelsLast::on}), Contains(Pair("channels-last", "on")));
}

// A run trained channels-last and one trained NCHW from the same seed, through the whole of
// fit() (the compute stage converting the uint8 batches into the model's layout): the same
// checkpoint bytes (NCHW, PyTorch's order), and the same predictions whichever layout loads it.
TEST(Recipe, ChannelsLastTrainsTheSameCheckpointAsNchw) {
  const test::TempDir dir;
  const std::filesystem::path root = test::write_tiny_shapes(dir);
  const nodes::DatasetPtr train_set = open_dataset(root / "train");
  const auto backend = nn::make_backend(gpu::Device::cpu());
  std::vector<std::string> checkpoints;
  for (const ChannelsLast layout : {ChannelsLast::off, ChannelsLast::on}) {
    const Recipe recipe{.epochs = 2,
                        .batch = 4,
                        .size = 16,
                        .transforms = {"random_resized_crop size=16", "random_horizontal_flip", "normalize"},
                        .channels_last = layout,
                        .seed = 5,
                        .threads = 2,
                        .autotune = false};
    const auto model = make_model(recipe, 2, *backend);
    EXPECT_EQ(model->layout(), layout == ChannelsLast::on ? gpu::TensorLayout::nhwc : gpu::TensorLayout::nchw);
    nn::Trainer trainer(*model, *backend, trainer_options(recipe, train_set->size()));
    const std::filesystem::path folder = dir / std::string(to_string(layout));
    (void)fit(trainer, train_set, nullptr, fit_options(recipe, train_set->classes()),
              {.checkpoint = checkpoint_every_epoch(folder)});
    checkpoints.push_back(test::bytes_of(folder / "last.safetensors"));
  }
  ASSERT_FALSE(checkpoints[0].empty());
  EXPECT_TRUE(checkpoints[0] == checkpoints[1]) << "the channels-last run saved other bytes";

  const std::filesystem::path checkpoint = dir / "on" / "last.safetensors";
  const std::vector<std::string> files = {train_set->name(0), train_set->name(9)};
  const InferenceModel planar = load_for_inference(checkpoint, *backend, ChannelsLast::off);
  const InferenceModel interleaved = load_for_inference(checkpoint, *backend, ChannelsLast::on);
  EXPECT_EQ(interleaved.model->layout(), gpu::TensorLayout::nhwc);
  const auto a = classify_files(planar, files, *backend);
  const auto b = classify_files(interleaved, files, *backend);
  ASSERT_EQ(a.size(), files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    ASSERT_TRUE(a[i].ok()) << a[i].error;
    EXPECT_EQ(a[i].probabilities, b[i].probabilities) << files[i];
  }
}

}  // namespace
}  // namespace stoke::train
