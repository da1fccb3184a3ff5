// Model cards (stoke/train/model_card.hpp): the metadata round trip, damaged or missing entries
// named, and a checkpoint written by a Trainer loaded back for inference with the same outputs.
#include "stoke/train/model_card.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/models.hpp>
#include <stoke/nn/tensor.hpp>
#include <stoke/nn/trainer.hpp>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"

namespace stoke::train {
namespace {

using nodes::test::error_message;
using nodes::test::TempDir;
using ::testing::HasSubstr;

const ModelCard card{.model = "small_cnn",
                     .image_size = 16,
                     .classes = {"00_circle", "01 square", "02_triangle"},
                     .eval_transforms = {"resize size=16", "center_crop size=16", "normalize"}};

TEST(ModelCard, RoundTripsThroughMetadata) {
  const ModelCard back = model_card_from(to_metadata(card), "run.safetensors");
  EXPECT_EQ(back.model, card.model);
  EXPECT_EQ(back.image_size, card.image_size);
  EXPECT_EQ(back.classes, card.classes);
  EXPECT_EQ(back.eval_transforms, card.eval_transforms);
  EXPECT_EQ(back.channels, 3);
  EXPECT_EQ(back.color, "rgb");
  ModelCard grey = card;
  grey.channels = 1;
  grey.color = "keep";
  const ModelCard grey_back = model_card_from(to_metadata(grey), "grey.safetensors");
  EXPECT_EQ(grey_back.channels, 1);
  EXPECT_EQ(grey_back.color, "keep");
  // Checkpoints from before the input's channels were recorded are RGB.
  std::map<std::string, std::string> old = to_metadata(grey);
  old.erase("channels");
  old.erase("color");
  EXPECT_EQ(model_card_from(old, "old.safetensors").channels, 3);
  old["color"] = "cmyk";
  EXPECT_THAT(error_message([&] { model_card_from(old, "old.safetensors"); }), HasSubstr("color 'cmyk'"));
}

TEST(ModelCard, AMissingEntryNamesTheFileAndTheEntry) {
  for (const char* key : {"model", "image_size", "classes", "eval_transforms"}) {
    std::map<std::string, std::string> metadata = to_metadata(card);
    metadata.erase(key);
    const std::string message = error_message([&] { model_card_from(metadata, "run.safetensors"); });
    EXPECT_THAT(message, HasSubstr("run.safetensors")) << key;
    EXPECT_THAT(message, HasSubstr(std::string("'") + key + "'"));
    EXPECT_THAT(message, HasSubstr("stoke train"));  // which checkpoints carry one
  }
}

TEST(ModelCard, DamagedEntriesAreNamed) {
  std::map<std::string, std::string> metadata = to_metadata(card);
  metadata["image_size"] = "big";
  EXPECT_THAT(error_message([&] { model_card_from(metadata, "run.safetensors"); }),
              HasSubstr("damaged (image_size 'big'"));
  metadata = to_metadata(card);
  metadata["classes"] = "only_one";
  EXPECT_THAT(error_message([&] { model_card_from(metadata, "run.safetensors"); }), HasSubstr("1 class names"));
}

TEST(ModelCard, ACheckpointLoadsForInferenceWithTheSameOutputs) {
  const TempDir dir;
  auto backend = nn::make_backend(gpu::Device::cpu());
  auto model = nn::make_model("small_cnn", {.classes = 3, .seed = 7});
  nn::Trainer trainer(*model, *backend,
                      {.sgd = {}, .schedule = {.kind = nn::LrScheduleKind::constant, .base_lr = 0.1f}});
  trainer.set_metadata(to_metadata(card));
  trainer.save(dir / "run.safetensors");

  const InferenceModel loaded = load_for_inference(dir / "run.safetensors", *backend);
  EXPECT_EQ(loaded.card.classes, card.classes);
  std::vector<float> pixels(2 * 3 * 16 * 16);
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i % 17) / 8.0f - 1.0f;
  const nn::Tensor images = nn::Tensor::view_of(pixels.data(), {2, 3, 16, 16}, gpu::DType::f32);
  nn::Context ctx{.backend = *backend, .mode = nn::Mode::eval};
  EXPECT_EQ(loaded.model->forward(images, ctx).to_vector(), model->forward(images, ctx).to_vector());

  // A model of grey scans: the card's channels build the model it was trained as.
  auto grey_model = nn::make_model("small_cnn", {.classes = 3, .in_channels = 1, .seed = 7});
  nn::Trainer grey_trainer(*grey_model, *backend,
                           {.sgd = {}, .schedule = {.kind = nn::LrScheduleKind::constant, .base_lr = 0.1f}});
  ModelCard grey = card;
  grey.channels = 1;
  grey.color = "keep";
  grey_trainer.set_metadata(to_metadata(grey));
  grey_trainer.save(dir / "grey.safetensors");
  const InferenceModel grey_loaded = load_for_inference(dir / "grey.safetensors", *backend);
  const nn::Tensor grey_images = nn::Tensor::view_of(pixels.data(), {2, 1, 16, 16}, gpu::DType::f32);
  EXPECT_EQ(grey_loaded.model->forward(grey_images, ctx).to_vector(), grey_model->forward(grey_images, ctx).to_vector());
  EXPECT_THROW(nn::make_model("small_cnn", {.classes = 3, .in_channels = 0}), std::invalid_argument);

  // A checkpoint without a card names itself and says what is missing.
  nn::Trainer bare(*model, *backend, {.sgd = {}, .schedule = {.kind = nn::LrScheduleKind::constant, .base_lr = 0.1f}});
  bare.save(dir / "bare.safetensors");
  const std::string message = error_message([&] { load_for_inference(dir / "bare.safetensors", *backend); });
  EXPECT_THAT(message, HasSubstr("bare.safetensors"));
  EXPECT_THAT(message, HasSubstr("'model'"));
}

}  // namespace
}  // namespace stoke::train
