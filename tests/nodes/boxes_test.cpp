// Boxes through every geometric step: the corners equal a hand computation, boxes leaving a crop
// are clipped or dropped by the stated rule, the fused decode-and-crop moves them as the plain
// path does, and a box still frames the shape it was drawn around after a random crop and flip.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <opencv2/imgproc.hpp>
#include <stoke/nodes/boxes.hpp>
#include <stoke/nodes/center_crop.hpp>
#include <stoke/nodes/decode.hpp>
#include <stoke/nodes/decode_augment.hpp>
#include <stoke/nodes/filter_boxes.hpp>
#include <stoke/nodes/jpeg_encode.hpp>
#include <stoke/nodes/random_horizontal_flip.hpp>
#include <stoke/nodes/random_resized_crop.hpp>
#include <stoke/nodes/registry.hpp>
#include <stoke/nodes/resize.hpp>
#include <string>
#include <vector>

namespace stoke::nodes {
namespace {

using Box = std::array<float, 4>;
using ::testing::HasSubstr;

Boxes two_boxes() {
  Boxes boxes;
  boxes.extras = 1;
  const float crowd = 0;
  boxes.add({10, 20, 110, 80}, 3, {&crowd, 1});
  const float single = 1;
  boxes.add({150, 5, 190, 45}, 7, {&single, 1});
  return boxes;
}

Image image_with(Boxes boxes, int width = 200, int height = 100) {
  return Image{.pixels = cv::Mat(height, width, CV_8UC3, cv::Scalar(1, 2, 3)), .name = "boxes.jpg", .boxes = std::move(boxes)};
}

TEST(Boxes, CropAndResizeTranslateScaleAndClip) {
  Boxes boxes = two_boxes();
  crop_resize_boxes(boxes, cv::Rect(0, 0, 200, 100), cv::Size(100, 50));  // halves everything
  EXPECT_EQ(boxes.xyxy, (std::vector<Box>{{5, 10, 55, 40}, {75, 2.5f, 95, 22.5f}}));
  EXPECT_EQ(boxes.visible, (std::vector<float>{1, 1}));

  // Keep x 50..150 at scale 1: box 0 (x 10..110) keeps 60 of its 100 columns, box 1 (x 150..190)
  // touches the edge with no area left and goes, with its class and extra value.
  boxes = two_boxes();
  crop_resize_boxes(boxes, cv::Rect(50, 0, 100, 100), cv::Size(100, 100));
  ASSERT_EQ(boxes.size(), 1u);
  EXPECT_EQ(boxes.xyxy[0], (Box{0, 20, 60, 80}));
  EXPECT_FLOAT_EQ(boxes.visible[0], 0.6f);
  EXPECT_EQ(boxes.classes, (std::vector<std::int32_t>{3}));
  EXPECT_EQ(boxes.extra, (std::vector<float>{0}));

  // A second crop multiplies: 30 of the remaining 60 columns -> 0.3 of the original area.
  crop_resize_boxes(boxes, cv::Rect(30, 0, 70, 100), cv::Size(140, 100));
  EXPECT_EQ(boxes.xyxy[0], (Box{0, 20, 60, 80}));  // x 0..30 scaled by 2
  EXPECT_FLOAT_EQ(boxes.visible[0], 0.3f);

  // A crop reaching beyond the image (padding): boxes shift by the padding.
  boxes = two_boxes();
  crop_resize_boxes(boxes, cv::Rect(-10, -5, 220, 110), cv::Size(220, 110));
  EXPECT_EQ(boxes.xyxy, (std::vector<Box>{{20, 25, 120, 85}, {160, 10, 200, 50}}));
}

TEST(Boxes, FlipMirrorsAboutTheImagesWidth) {
  Boxes boxes = two_boxes();
  flip_boxes_horizontally(boxes, 200);
  EXPECT_EQ(boxes.xyxy, (std::vector<Box>{{90, 20, 190, 80}, {10, 5, 50, 45}}));
}

TEST(Boxes, FilterDropsByTheStatedRule) {
  Boxes boxes = two_boxes();
  boxes.visible = {0.4f, 0.6f};
  Boxes kept = boxes;
  EXPECT_EQ(filter_boxes(kept, {.min_visible = 0.5f}), 1u);
  EXPECT_EQ(kept.classes, (std::vector<std::int32_t>{7}));
  kept = boxes;
  EXPECT_EQ(filter_boxes(kept, {.min_size = 41.0f}), 1u);  // box 1 is 40 x 40
  EXPECT_EQ(kept.classes, (std::vector<std::int32_t>{3}));
  kept = boxes;
  EXPECT_EQ(filter_boxes(kept, {}), 0u);
  EXPECT_EQ(kept, boxes);

  // As a registry step, and its parameters checked.
  const TransformPtr step = Registry::builtin().make("filter_boxes min_visible=0.5 min_size=1");
  Image image = image_with(boxes);
  ItemRng rng(1, 0, 0, 1);
  (*step)(image, rng);
  EXPECT_EQ(image.boxes.classes, (std::vector<std::int32_t>{7}));
  EXPECT_THROW(Registry::builtin().make("filter_boxes min_visible=2"), std::invalid_argument);
}

TEST(Boxes, EveryGeometricStepMovesThemAsByHand) {
  ItemRng rng(7, 0, 3, 1);
  // resize: shorter side 50 -> 100x50, scale 0.5
  Image image = image_with(two_boxes());
  (*std::make_shared<Resize>(50))(image, rng);
  EXPECT_EQ(image.boxes.xyxy, (std::vector<Box>{{5, 10, 55, 40}, {75, 2.5f, 95, 22.5f}}));
  // center_crop 120x120 of 200x100: left 40, top padded by 10
  image = image_with(two_boxes());
  (*std::make_shared<CenterCrop>(cv::Size(120, 120)))(image, rng);
  EXPECT_EQ(image.boxes.xyxy, (std::vector<Box>{{0, 30, 70, 90}, {110, 15, 120, 55}}));
  EXPECT_FLOAT_EQ(image.boxes.visible[0], 0.7f);
  EXPECT_FLOAT_EQ(image.boxes.visible[1], 0.25f);
  // flip with p = 1
  image = image_with(two_boxes());
  (*std::make_shared<RandomHorizontalFlip>(1.0))(image, rng);
  EXPECT_EQ(image.boxes.xyxy, (std::vector<Box>{{90, 20, 190, 80}, {10, 5, 50, 45}}));
  // random_resized_crop: the region its plan draws, then the same arithmetic by hand
  const RandomResizedCrop crop(cv::Size(64, 64));
  ItemRng plan_rng(11, 0, 5, 1);
  const Region region = *crop.plan(cv::Size(200, 100), plan_rng);
  image = image_with(two_boxes());
  ItemRng apply_rng(11, 0, 5, 1);
  crop(image, apply_rng);
  Boxes expected = two_boxes();
  std::vector<bool> keep;
  std::vector<Box> corners;
  for (const Box& b : expected.xyxy) {
    const auto map = [&](float v, int origin, int from, int to) {
      return std::clamp((static_cast<double>(v) - origin) * to / from, 0.0, static_cast<double>(to));
    };
    const Box m{static_cast<float>(map(b[0], region.crop.x, region.crop.width, 64)),
                static_cast<float>(map(b[1], region.crop.y, region.crop.height, 64)),
                static_cast<float>(map(b[2], region.crop.x, region.crop.width, 64)),
                static_cast<float>(map(b[3], region.crop.y, region.crop.height, 64))};
    if (m[2] > m[0] && m[3] > m[1]) corners.push_back(m);
  }
  EXPECT_EQ(image.boxes.xyxy, corners) << "region " << region.crop;
}

TEST(Boxes, TheFusedDecodeMovesThemAsThePlainPathDoes) {
  cv::Mat photo(120, 160, CV_8UC3, cv::Scalar(40, 90, 200));
  Sample sample{.bytes = Bytes(encode_jpeg(photo, 90)), .name = "photo.jpg", .boxes = two_boxes()};
  const std::vector<TransformPtr> steps = Registry::builtin().make_list({"random_resized_crop size=48", "random_horizontal_flip"});
  for (std::uint64_t index = 0; index < 20; ++index) {
    sample.index = index;
    const Image fused = DecodeAugment(Decoder(), Augment(steps, 3), true)(sample);
    const Image plain = DecodeAugment(Decoder(), Augment(steps, 3), false)(sample);
    EXPECT_EQ(fused.boxes, plain.boxes) << "item " << index;
  }
}

TEST(Boxes, ABoxStillFramesItsShapeAfterCropsAndFlips) {
  // A white rectangle on black, its box exactly around it; after a random crop + resize + flip the
  // box must still frame the bright pixels (to within the resampling's one-pixel blur).
  cv::Mat pixels(120, 160, CV_8UC3, cv::Scalar(0, 0, 0));
  cv::rectangle(pixels, cv::Rect(40, 30, 60, 50), cv::Scalar(255, 255, 255), cv::FILLED);
  Boxes boxes;
  boxes.add({40, 30, 100, 80}, 1);
  const Augment augment(Registry::builtin().make_list({"random_resized_crop size=64 scale=0.5:1", "random_horizontal_flip"}), 9);
  int framed = 0;
  for (std::uint64_t index = 0; index < 30; ++index) {
    Image image{.pixels = pixels, .index = index, .boxes = boxes};
    image = augment(std::move(image));
    cv::Mat grey;
    cv::cvtColor(image.pixels, grey, cv::COLOR_RGB2GRAY);
    const cv::Rect bright = cv::boundingRect(grey > 128);
    if (image.boxes.empty()) {
      EXPECT_TRUE(bright.empty()) << "item " << index << ": the box was dropped but its shape is in view";
      continue;
    }
    const Box& b = image.boxes.xyxy[0];
    EXPECT_NEAR(b[0], bright.x, 1.5) << "item " << index;
    EXPECT_NEAR(b[1], bright.y, 1.5) << "item " << index;
    EXPECT_NEAR(b[2], bright.br().x, 1.5) << "item " << index;
    EXPECT_NEAR(b[3], bright.br().y, 1.5) << "item " << index;
    ++framed;
  }
  EXPECT_GT(framed, 20);
}

TEST(Boxes, BadBoxesAreRefusedNamingTheItem) {
  Boxes inverted;
  inverted.add({50, 10, 20, 40}, 0);
  Image image = image_with(inverted);
  try {
    check_fields(image, "decode");
    FAIL() << "an inverted box was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_THAT(error.what(), HasSubstr("decode: boxes.jpg: box 0 is [50"));
  }
  Boxes short_classes = two_boxes();
  short_classes.classes.pop_back();
  EXPECT_THROW(check_boxes(short_classes, "x"), std::invalid_argument);
  EXPECT_THROW(two_boxes().add({0, 0, 1, 1}, 0), std::invalid_argument);  // no extra value given
}

}  // namespace
}  // namespace stoke::nodes
