// Collate: Images into pooled Batches, alone and as the batch stage of a stoke::graph pipeline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nodes/batch_pool.hpp>
#include <stoke/nodes/collate.hpp>
#include <stoke/nodes/normalize.hpp>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace stoke::nodes {
namespace {

using namespace std::chrono_literals;

constexpr int W = 6;
constexpr int H = 4;

/// The value of channel `ch` of pixel (r, c) of item `index`: differs between items and positions.
std::uint8_t pixel_u8(std::uint64_t index, int r, int c, int ch) {
  return static_cast<std::uint8_t>(index * 31 + static_cast<std::uint64_t>(r * 7 + c * 3 + ch));
}
float pixel_f32(std::uint64_t index, int ch, int r, int c) {
  return static_cast<float>(index) + 0.25f * static_cast<float>(ch) + 0.01f * static_cast<float>(r * W + c);
}

std::string name_of(std::uint64_t index) { return "img" + std::to_string(index) + ".jpg"; }
int label_of(std::uint64_t index) { return static_cast<int>(index % 7); }

/// An hwc_u8 Image; with `roi`, its pixels are a view into a larger matrix (rows not contiguous).
Image make_u8(std::uint64_t index, std::uint32_t epoch = 0, int width = W, int height = H, bool roi = false) {
  cv::Mat pixels;
  if (roi) {
    cv::Mat big(height + 3, width + 5, CV_8UC3, cv::Scalar(9, 9, 9));
    pixels = big(cv::Rect(2, 1, width, height));
  } else {
    pixels.create(height, width, CV_8UC3);
  }
  for (int r = 0; r < height; ++r)
    for (int c = 0; c < width; ++c)
      for (int ch = 0; ch < 3; ++ch) pixels.ptr<std::uint8_t>(r)[c * 3 + ch] = pixel_u8(index, r, c, ch);
  return Image{.pixels = pixels,
               .layout = PixelLayout::hwc,
               .label = label_of(index),
               .index = index,
               .epoch = epoch,
               .name = name_of(index)};
}

/// A chw_f32 Image: three planes of H x W floats stacked into a (3H) x W matrix.
Image make_f32(std::uint64_t index) {
  cv::Mat pixels(3 * H, W, CV_32FC1);
  for (int ch = 0; ch < 3; ++ch)
    for (int r = 0; r < H; ++r)
      for (int c = 0; c < W; ++c) pixels.at<float>(ch * H + r, c) = pixel_f32(index, ch, r, c);
  return Image{.pixels = pixels,
               .layout = PixelLayout::chw_f32,
               .label = label_of(index),
               .index = index,
               .epoch = 0,
               .name = name_of(index)};
}

/// Checks item i of an nhwc_u8 batch against the item the test made for `index`.
::testing::AssertionResult holds_u8(const Batch& batch, std::size_t i, std::uint64_t index) {
  const auto data = batch.u8().subspan(i * batch.shape().item_bytes(), batch.shape().item_bytes());
  for (int r = 0; r < H; ++r)
    for (int c = 0; c < W; ++c)
      for (int ch = 0; ch < 3; ++ch) {
        const std::uint8_t got = data[static_cast<std::size_t>((r * W + c) * 3 + ch)];
        if (got != pixel_u8(index, r, c, ch))
          return ::testing::AssertionFailure()
                 << "item " << i << " (index " << index << ") pixel (" << r << ", " << c << ", " << ch << ") is "
                 << int(got) << ", expected " << int(pixel_u8(index, r, c, ch));
      }
  if (batch.labels()[i] != label_of(index)) return ::testing::AssertionFailure() << "label of item " << i;
  if (batch.indices()[i] != index) return ::testing::AssertionFailure() << "index of item " << i;
  return ::testing::AssertionSuccess();
}

/// Collects what a Collate emits, without a pipeline.
class Collector final : public graph::detail::EmitTarget<Batch> {
 public:
  void emit(Batch batch) override { batches.push_back(std::move(batch)); }
  std::vector<Batch> batches;
};

/// Feeds `images` to `collate`, then flushes; returns the batches.
std::vector<Batch> run_collate(Collate& collate, std::vector<Image> images, bool flush = true) {
  Collector collector;
  for (auto& image : images) {
    graph::Emitter<Batch> out(collector);
    collate(std::move(image), out);
  }
  if (flush) {
    graph::Emitter<Batch> out(collector);
    collate.flush(out);
  }
  return std::move(collector.batches);
}

const BatchShape shape4{.batch_size = 4, .height = H, .width = W};

TEST(Collate, FullBatchesHoldPixelsLabelsIndicesAndNamesInOrder) {
  BatchPool pool(shape4, 3);
  Collate collate(pool);
  std::vector<Image> images;
  for (std::uint64_t i = 0; i < 8; ++i) images.push_back(make_u8(100 + i, 2, W, H, /*roi=*/i % 2 == 1));
  const auto batches = run_collate(collate, std::move(images));

  ASSERT_EQ(batches.size(), 2u);
  for (std::size_t b = 0; b < 2; ++b) {
    ASSERT_EQ(batches[b].size(), 4u);
    EXPECT_EQ(batches[b].epoch(), 2u);
    EXPECT_EQ(batches[b].data().size(), 4 * shape4.item_bytes());
    for (std::size_t i = 0; i < 4; ++i) {
      const std::uint64_t index = 100 + b * 4 + i;
      EXPECT_TRUE(holds_u8(batches[b], i, index));
      EXPECT_EQ(batches[b].names()[i], name_of(index));
    }
  }
  EXPECT_EQ(collate.pending(), 0u);
  EXPECT_EQ(pool.stats().free, 1u);
}

TEST(Collate, FlushEmitsTheFinalPartialBatch) {
  BatchPool pool(shape4, 4);
  Collate collate(pool);
  std::vector<Image> images;
  for (std::uint64_t i = 0; i < 10; ++i) images.push_back(make_u8(i));
  const auto batches = run_collate(collate, std::move(images));

  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].size(), 4u);
  EXPECT_EQ(batches[1].size(), 4u);
  ASSERT_EQ(batches[2].size(), 2u);
  EXPECT_FALSE(batches[2].full());
  EXPECT_EQ(batches[2].data().size(), 2 * shape4.item_bytes());
  EXPECT_EQ(batches[2].labels().size(), 2u);
  EXPECT_TRUE(holds_u8(batches[2], 0, 8));
  EXPECT_TRUE(holds_u8(batches[2], 1, 9));
}

TEST(Collate, DropLastDropsThePartialBatch) {
  BatchPool pool(shape4, 4);
  Collate collate(pool, {.drop_last = true});
  std::vector<Image> images;
  for (std::uint64_t i = 0; i < 10; ++i) images.push_back(make_u8(i));
  const auto batches = run_collate(collate, std::move(images));

  ASSERT_EQ(batches.size(), 2u);
  EXPECT_TRUE(holds_u8(batches[1], 3, 7));
  EXPECT_EQ(collate.pending(), 0u);
  EXPECT_EQ(pool.stats().acquired, 2u);  // no slot was taken for the dropped items
}

TEST(Collate, BatchesDoNotSpanEpochs) {
  BatchPool pool(shape4, 4);
  Collate collate(pool);
  std::vector<Image> images;
  for (std::uint64_t i = 0; i < 5; ++i) images.push_back(make_u8(i, 0));
  for (std::uint64_t i = 0; i < 3; ++i) images.push_back(make_u8(i, 1));
  const auto batches = run_collate(collate, std::move(images));

  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0].size(), 4u);
  EXPECT_EQ(batches[0].epoch(), 0u);
  ASSERT_EQ(batches[1].size(), 1u);
  EXPECT_EQ(batches[1].epoch(), 0u);
  EXPECT_TRUE(holds_u8(batches[1], 0, 4));
  ASSERT_EQ(batches[2].size(), 3u);
  EXPECT_EQ(batches[2].epoch(), 1u);
  EXPECT_TRUE(holds_u8(batches[2], 0, 0));
}

TEST(Collate, ItemsWaitOutsideThePool) {
  BatchPool pool(shape4, 2);
  Collate collate(pool);
  std::vector<Image> images;
  for (std::uint64_t i = 0; i < 3; ++i) images.push_back(make_u8(i));
  const auto batches = run_collate(collate, std::move(images), /*flush=*/false);
  EXPECT_TRUE(batches.empty());
  EXPECT_EQ(collate.pending(), 3u);
  EXPECT_EQ(pool.stats().free, 2u);
}

TEST(Collate, FloatPlanesAreCopiedAsNchw) {
  const BatchShape shape{
      .batch_size = 2, .height = H, .width = W, .layout = BatchLayout::nchw, .pixel_type = ElementType::f32};
  BatchPool pool(shape, 1);
  Collate collate(pool);
  const auto batches = run_collate(collate, {make_f32(3), make_f32(4)});
  ASSERT_EQ(batches.size(), 1u);
  const auto data = batches[0].f32();
  ASSERT_EQ(data.size(), 2u * 3 * H * W);
  for (std::size_t i = 0; i < 2; ++i)
    for (int ch = 0; ch < 3; ++ch)
      for (int r = 0; r < H; ++r)
        for (int c = 0; c < W; ++c)
          ASSERT_EQ(data[i * 3 * H * W + static_cast<std::size_t>((ch * H + r) * W + c)], pixel_f32(3 + i, ch, r, c))
              << "item " << i << " channel " << ch << " (" << r << ", " << c << ")";
  EXPECT_EQ(batches[0].labels()[1], label_of(4));
}

// ---- beyond 8-bit RGB: pixel types, channel counts, masks and targets -------------------------

/// An hwc Image of `channels` channels of `depth` whose element (r, c, ch) is value(index, r, c, ch)
/// (wrapped into the type), with a mask whose (r, c) is (index + r * W + c) % 5 when `mask_depth`
/// is not -1, and targets "age" (a scalar) and "findings" (3 values) when `targets`.
template <class T>
Image make_general(std::uint64_t index, int channels, int depth, int mask_depth = -1, bool targets = false) {
  const auto value = [](std::uint64_t i, int r, int c, int ch) {
    return static_cast<T>(static_cast<std::int64_t>(i * 7919 + static_cast<std::uint64_t>(r * 331 + c * 17 + ch)) -
                          (std::is_signed_v<T> ? 2000 : 0));
  };
  cv::Mat pixels(H, W, CV_MAKETYPE(depth, channels));
  for (int r = 0; r < H; ++r)
    for (int c = 0; c < W; ++c)
      for (int ch = 0; ch < channels; ++ch) pixels.ptr<T>(r)[c * channels + ch] = value(index, r, c, ch);
  Image image{
      .pixels = pixels, .layout = PixelLayout::hwc, .label = label_of(index), .index = index, .name = name_of(index)};
  if (mask_depth >= 0) {
    cv::Mat mask(H, W, CV_MAKETYPE(mask_depth, 1));
    for (int r = 0; r < H; ++r)
      for (int c = 0; c < W; ++c) {
        const int id = static_cast<int>((index + static_cast<std::uint64_t>(r * W + c)) % 5);
        if (mask_depth == CV_8U) mask.at<std::uint8_t>(r, c) = static_cast<std::uint8_t>(id);
        if (mask_depth == CV_16U) mask.at<std::uint16_t>(r, c) = static_cast<std::uint16_t>(id * 1000);
        if (mask_depth == CV_32S) mask.at<std::int32_t>(r, c) = id * 100000;
      }
    image.mask = mask;
  }
  if (targets) {
    image.targets["age"] = Target{.shape = {}, .values = {static_cast<float>(index) + 0.5f}};
    image.targets["findings"] = Target{.shape = {3}, .values = {1.0f, 0.0f, static_cast<float>(index)}};
  }
  return image;
}

/// Checks that item i of `batch` holds `image`'s pixels bit for bit (NHWC of T).
template <class T>
::testing::AssertionResult holds_pixels(const Batch& batch, std::size_t i, const Image& image) {
  const auto data = batch.pixels_as<T>().subspan(i * batch.shape().item_elements(), batch.shape().item_elements());
  const int channels = image.channels();
  for (int r = 0; r < H; ++r)
    for (int c = 0; c < W; ++c)
      for (int ch = 0; ch < channels; ++ch)
        if (data[static_cast<std::size_t>((r * W + c) * channels + ch)] != image.pixels.ptr<T>(r)[c * channels + ch])
          return ::testing::AssertionFailure() << "item " << i << " pixel (" << r << ", " << c << ", " << ch << ")";
  return ::testing::AssertionSuccess();
}

TEST(Collate, SixteenBitSignedAndFloatPixelsOfAnyChannelCountAreCopiedBitExactly) {
  const auto check = [](auto zero, int depth, int channels, ElementType type) {
    using T = decltype(zero);
    std::vector<Image> images;
    for (std::uint64_t i = 0; i < 3; ++i) images.push_back(make_general<T>(i, channels, depth));
    const BatchShape shape = shape_of(images[0], 3);
    EXPECT_EQ(shape.pixel_type, type);
    EXPECT_EQ(shape.channels, channels);
    EXPECT_FALSE(shape.mask);
    BatchPool pool(shape, 1);
    Collate collate(pool);
    const auto batches = run_collate(collate, images);
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_EQ(batches[0].data().size(), 3u * H * W * static_cast<std::size_t>(channels) * sizeof(T));
    for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(holds_pixels<T>(batches[0], i, images[i])) << shape.describe();
  };
  check(std::uint16_t{}, CV_16U, 1, ElementType::u16);
  check(std::int16_t{}, CV_16S, 1, ElementType::i16);
  check(std::int16_t{}, CV_16S, 5, ElementType::i16);
  check(std::uint8_t{}, CV_8U, 4, ElementType::u8);
  check(float{}, CV_32F, 2, ElementType::f32);
}

TEST(Collate, MasksAndTargetsGoIntoTheirOwnFieldsBesideThePixels) {
  for (const int mask_depth : {CV_8U, CV_16U, CV_32S}) {
    std::vector<Image> images;
    for (std::uint64_t i = 0; i < 4; ++i)
      images.push_back(make_general<std::int16_t>(i + 10, 1, CV_16S, mask_depth, true));
    const BatchShape shape = shape_of(images[0], 3);
    ASSERT_TRUE(shape.mask);
    ASSERT_EQ(shape.targets.size(), 2u);
    EXPECT_EQ(shape.targets[1], (TargetShape{"findings", {3}}));
    BatchPool pool(shape, 2);
    Collate collate(pool);
    const auto batches = run_collate(collate, images);
    ASSERT_EQ(batches.size(), 2u);  // 3 + a partial 1
    for (std::size_t b = 0; b < 2; ++b) {
      const Batch& batch = batches[b];
      for (std::size_t i = 0; i < batch.size(); ++i) {
        const Image& image = images[b * 3 + i];
        EXPECT_TRUE(holds_pixels<std::int16_t>(batch, i, image));
        const auto mask = batch.mask_item(i);
        ASSERT_EQ(mask.size(), image.mask.total() * image.mask.elemSize());
        EXPECT_EQ(std::memcmp(mask.data(), image.mask.data, mask.size()), 0) << "mask of item " << b * 3 + i;
        EXPECT_EQ(batch.target("age")[i], image.targets.at("age").values[0]);
        const auto findings = batch.target("findings").subspan(i * 3, 3);
        EXPECT_TRUE(std::equal(findings.begin(), findings.end(), image.targets.at("findings").values.begin()));
      }
      EXPECT_EQ(batch.target("findings").size(), batch.size() * 3);
    }
    if (mask_depth == CV_16U) {
      EXPECT_EQ(batches[0].mask_as<std::uint16_t>()[1], 1000);  // item 10, (0, 1): class (10 + 1) % 5 = 1
    }
  }
}

TEST(Collate, ThePoolsAccessorsRefuseAnotherTypeOrAMissingField) {
  BatchPool pool(BatchShape{.batch_size = 2,
                            .height = H,
                            .width = W,
                            .channels = 1,
                            .pixel_type = ElementType::u16,
                            .mask = ElementType::u8,
                            .targets = {{"age"}}},
                 1);
  Batch batch = pool.acquire();
  batch.set_size(2);
  EXPECT_EQ(batch.pixels_as<std::uint16_t>().size(), 2u * H * W);
  EXPECT_THROW((void)batch.u8(), std::logic_error);
  EXPECT_THROW((void)batch.mask_as<std::int32_t>(), std::logic_error);
  EXPECT_EQ(batch.mask_as<std::uint8_t>().size(), 2u * H * W);
  try {
    (void)batch.target("weight");
    FAIL() << "an unknown target was found";
  } catch (const std::out_of_range& error) {
    EXPECT_NE(std::string(error.what()).find("it has age"), std::string::npos) << error.what();
  }
  BatchPool plain(BatchShape{.batch_size = 2, .height = H, .width = W}, 1);
  Batch rgb = plain.acquire();
  EXPECT_FALSE(rgb.has_mask());
  EXPECT_TRUE(rgb.mask().empty());
  EXPECT_THROW((void)rgb.mask_as<std::uint8_t>(), std::logic_error);
}

// Nothing is lost quietly and nothing mixes: every field of an item must have its place in the batch.
TEST(Collate, AFieldWithoutAPlaceOrAPlaceWithoutAFieldIsAnErrorNamingBoth) {
  const auto message = [](const BatchShape& shape, Image image) -> std::string {
    BatchPool pool(shape, 1);
    Collate collate(pool);
    Collector collector;
    graph::Emitter<Batch> out(collector);
    try {
      collate(std::move(image), out);
    } catch (const std::invalid_argument& error) {
      return error.what();
    }
    return "(accepted)";
  };
  const BatchShape rgb{.batch_size = 2, .height = H, .width = W};
  Image with_mask = make_u8(1);
  with_mask.name = "seg.png";
  with_mask.mask = cv::Mat(H, W, CV_8UC1, cv::Scalar(1));
  EXPECT_THAT(message(rgb, with_mask), ::testing::HasSubstr("seg.png carries a mask but the batch holds none"));
  BatchShape masked = rgb;
  masked.mask = ElementType::u8;
  EXPECT_THAT(message(masked, make_u8(2)), ::testing::HasSubstr("has no mask"));
  masked.mask = ElementType::i32;
  EXPECT_THAT(message(masked, with_mask), ::testing::HasSubstr("but the batch holds i32 masks"));

  Image with_age = make_u8(3);
  with_age.targets["age"] = Target{.shape = {}, .values = {3.0f}};
  EXPECT_THAT(message(rgb, with_age), ::testing::HasSubstr("carries target 'age' but the batch has no place for it"));
  BatchShape aged = rgb;
  aged.targets = {{"age", {2}}};
  EXPECT_THAT(message(aged, with_age), ::testing::HasSubstr("target 'age' of shape a scalar but the batch holds [2]"));
  aged.targets = {{"age"}, {"sex"}};
  EXPECT_THAT(message(aged, with_age), ::testing::HasSubstr("lacks target 'sex'"));

  EXPECT_THAT(message(rgb, make_general<std::uint16_t>(4, 3, CV_16U)),
              ::testing::HasSubstr("uint16 3-channel 6x4 pixels but the batch holds u8"));
  EXPECT_THAT(message(rgb, make_general<std::uint8_t>(5, 1, CV_8U)),
              ::testing::HasSubstr("has 1 channels but the batch holds 3"));
}

TEST(Collate, WrongSizeIsAnErrorNamingTheItemAndBothSizes) {
  BatchPool pool(BatchShape{.batch_size = 2, .height = 224, .width = 224}, 1);
  Collate collate(pool);
  Image image = make_u8(5, 0, 500, 375);
  image.name = "photo.jpg";
  Collector collector;
  graph::Emitter<Batch> out(collector);
  try {
    collate(std::move(image), out);
    FAIL() << "a 500x375 image went into a 224x224 batch";
  } catch (const std::invalid_argument& error) {
    EXPECT_STREQ(error.what(),
                 "collate: photo.jpg is 500x375 but the batch holds 224x224: add a resize/crop transform");
  }
  EXPECT_EQ(collate.pending(), 0u);
}

TEST(Collate, WrongLayoutIsAnErrorNamingTheItem) {
  BatchPool pool(shape4, 1);
  Collate collate(pool);
  Collector collector;
  graph::Emitter<Batch> out(collector);
  try {
    collate(make_f32(12), out);
    FAIL() << "a chw_f32 image went into an nhwc_u8 batch";
  } catch (const std::invalid_argument& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(name_of(12)), std::string::npos) << message;
    EXPECT_NE(message.find("chw_f32"), std::string::npos) << message;
    EXPECT_NE(message.find("nhwc"), std::string::npos) << message;
  }
  // Without a name the index identifies the item.
  Image unnamed = make_u8(77, 0, W + 1, H);
  unnamed.name.clear();
  EXPECT_THROW(
      {
        try {
          collate(std::move(unnamed), out);
        } catch (const std::invalid_argument& error) {
          EXPECT_NE(std::string(error.what()).find("item 77"), std::string::npos) << error.what();
          throw;
        }
      },
      std::invalid_argument);
  EXPECT_TRUE(collector.batches.empty());
}

TEST(Collate, BoxesArePaddedToTheRoomWithCountsAndTooManyAreRefused) {
  const auto with_boxes = [](std::uint64_t index, int count) {
    Image image = make_u8(index);
    image.boxes.extras = 1;
    for (int b = 0; b < count; ++b) {
      const float crowd = static_cast<float>(b % 2);
      image.boxes.add({static_cast<float>(b), 1.0f, static_cast<float>(b) + 2.5f, 3.0f},
                      static_cast<std::int32_t>(10 * index + b), {&crowd, 1});
    }
    return image;
  };
  const BatchShape shape = [&] {
    BatchShape s = shape_of(with_boxes(0, 2), 3);
    s.max_boxes = 4;
    return s;
  }();
  EXPECT_EQ(shape.describe(), "3 x 4x6x3 nhwc u8 + boxes 4 (1 extra)");
  EXPECT_EQ(shape_of(with_boxes(0, 2), 3).max_boxes, default_max_boxes);
  BatchPool pool(shape, 1);
  Collate collate(pool);
  const auto batches = run_collate(collate, {with_boxes(1, 2), with_boxes(2, 0), with_boxes(3, 4)});
  ASSERT_EQ(batches.size(), 1u);
  const Batch& batch = batches[0];
  EXPECT_EQ(std::vector<std::int32_t>(batch.box_counts().begin(), batch.box_counts().end()),
            (std::vector<std::int32_t>{2, 0, 4}));
  // Item 0: boxes 10 and 11, then two padded; item 1: all padding; item 2: four boxes.
  EXPECT_EQ(std::vector<std::int32_t>(batch.box_classes().begin(), batch.box_classes().begin() + 4),
            (std::vector<std::int32_t>{10, 11, -1, -1}));
  EXPECT_EQ(std::vector<std::int32_t>(batch.box_classes().begin() + 4, batch.box_classes().begin() + 8),
            (std::vector<std::int32_t>(4, -1)));
  EXPECT_EQ(batch.box_classes()[8 + 3], 33);
  EXPECT_EQ(std::vector<float>(batch.boxes().begin() + 4, batch.boxes().begin() + 12),
            (std::vector<float>{1, 1, 3.5f, 3, 0, 0, 0, 0}));  // item 0's box 1, then padding
  EXPECT_EQ(std::vector<float>(batch.box_extras().begin() + 8, batch.box_extras().end()),
            (std::vector<float>{0, 1, 0, 1}));

  // More boxes than room, and boxes where the batch has none, are errors naming the item.
  Collector collector;
  graph::Emitter<Batch> out(collector);
  try {
    collate(with_boxes(4, 5), out);
    FAIL() << "5 boxes went into room for 4";
  } catch (const std::invalid_argument& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("img4.jpg carries 5 boxes but the batch has room for 4"));
  }
  BatchPool plain(BatchShape{.batch_size = 2, .height = H, .width = W}, 1);
  Collate plain_collate(plain);
  EXPECT_THROW(plain_collate(with_boxes(5, 1), out), std::invalid_argument);
}

TEST(Collate, VariableSizeItemsArePaddedToTheBatchsLargestWithTheirSizes) {
  // Three RGB items of 6x4, 3x2 and 5x3 (w x h) with masks; room for up to 8x8.
  std::vector<Image> images;
  for (const cv::Size size : {cv::Size(6, 4), cv::Size(3, 2), cv::Size(5, 3)}) {
    Image image = make_u8(images.size() + 1, 0, size.width, size.height);
    image.mask = cv::Mat(size, CV_8UC1, cv::Scalar(static_cast<int>(images.size()) + 1));
    images.push_back(image);
  }
  BatchShape shape{.batch_size = 3, .height = 8, .width = 8, .mask = ElementType::u8, .variable_size = true};
  EXPECT_EQ(shape.describe(), "3 x 8x8x3 nhwc u8 + mask u8 (variable size, up to 8x8)");
  BatchPool pool(shape, 1);
  Collate collate(pool);
  const auto batches = run_collate(collate, images);
  ASSERT_EQ(batches.size(), 1u);
  const Batch& batch = batches[0];
  EXPECT_EQ(batch.extent(), cv::Size(6, 4));
  EXPECT_EQ(batch.data().size(), 3u * 6 * 4 * 3);
  EXPECT_EQ(std::vector<std::int32_t>(batch.item_sizes().begin(), batch.item_sizes().end()),
            (std::vector<std::int32_t>{4, 6, 2, 3, 3, 5}));
  // Item 1 (3x2) at the top-left of its 6x4 frame, zeros beyond; its mask likewise.
  const auto item = batch.u8().subspan(6 * 4 * 3, 6 * 4 * 3);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c)
      for (int ch = 0; ch < 3; ++ch) {
        const std::uint8_t got = item[static_cast<std::size_t>((r * 6 + c) * 3 + ch)];
        if (r < 2 && c < 3)
          ASSERT_EQ(got, images[1].pixels.ptr<std::uint8_t>(r)[c * 3 + ch]) << r << ", " << c;
        else
          ASSERT_EQ(got, 0) << "padding at " << r << ", " << c;
      }
  const auto mask = batch.mask_as<std::uint8_t>().subspan(6 * 4, 6 * 4);
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 2), 6);  // the 3x2 item's class, the rest 0
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 0), 18);

  // Larger than the room: refused, naming the item and both sizes.
  Collector collector;
  graph::Emitter<Batch> out(collector);
  EXPECT_THAT(
      [&] {
        try {
          collate(make_u8(9, 0, 9, 4), out);
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
        return std::string("(accepted)");
      }(),
      ::testing::HasSubstr("img9.jpg is 9x4 but the batch holds at most 8x8"));
  // set_extent only on variable-size batches, within the room.
  BatchPool fixed(BatchShape{.batch_size = 1, .height = H, .width = W}, 1);
  Batch plain = fixed.acquire();
  EXPECT_THROW(plain.set_extent(cv::Size(2, 2)), std::logic_error);
  BatchPool spare(shape, 1);  // `pool`'s one slot is held by the batch above
  Batch variable = spare.acquire();
  EXPECT_THROW(variable.set_extent(cv::Size(9, 2)), std::out_of_range);
}

TEST(Collate, VariableSizeFloatPlanesEachKeepTheirFrame) {
  // chw_f32 items of 3x2 and 2x1 (w x h): each of the three planes in its own 3x2 frame.
  const auto planes = [](int w, int h, float base) {
    cv::Mat m(3 * h, w, CV_32FC1);
    for (int r = 0; r < 3 * h; ++r)
      for (int c = 0; c < w; ++c) m.at<float>(r, c) = base + static_cast<float>(r * 10 + c);
    return Image{.pixels = m, .layout = PixelLayout::chw_f32, .name = "p"};
  };
  BatchPool pool(BatchShape{.batch_size = 2,
                            .height = 4,
                            .width = 4,
                            .layout = BatchLayout::nchw,
                            .pixel_type = ElementType::f32,
                            .variable_size = true},
                 1);
  Collate collate(pool);
  const auto batches = run_collate(collate, {planes(3, 2, 100), planes(2, 1, 200)});
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].extent(), cv::Size(3, 2));
  const auto f = batches[0].f32();
  ASSERT_EQ(f.size(), 2u * 3 * 3 * 2);
  // Item 1, plane 2 (its rows 2 of the stacked matrix): value 200 + 20 at the frame's (0, 0), 0 beyond.
  const std::size_t plane = 18 + 2 * 6;
  EXPECT_EQ(f[plane + 0], 220.0f);
  EXPECT_EQ(f[plane + 1], 221.0f);
  EXPECT_EQ(f[plane + 2], 0.0f);
  EXPECT_EQ(f[plane + 3], 0.0f);
  EXPECT_EQ(f[5], 112.0f);  // item 0, plane 0, row 1, column 2
}

// The batch stage's normalization (CollateOptions::normalize): 8-bit HWC items written into f32
// NCHW batches give the bytes of Normalize's float images collated, in one pass.
TEST(Collate, NormalizingIntoTheBatchGivesTheBytesOfNormalizeThenCollate) {
  const PixelNormalization n{.mean = {0.5f, 0.25f, 0.75f}, .stddev = {0.2f, 0.3f, 0.4f}, .range = 0};
  const BatchShape floats{
      .batch_size = 4, .height = H, .width = W, .layout = BatchLayout::nchw, .pixel_type = ElementType::f32};
  Collate fused(BatchPool(floats, 2), {.normalize = n});
  Collate plain(BatchPool(floats, 2));
  const Normalize normalize(n.mean, n.stddev, n.range);
  std::vector<Image> raw;
  std::vector<Image> normalized;
  for (std::uint64_t i = 0; i < 6; ++i) {
    raw.push_back(make_u8(i, 0, W, H, i % 2 == 1));  // every other one a view with a row stride
    Image image = make_u8(i);
    ItemRng rng(0, 0, i);
    normalize(image, rng);
    normalized.push_back(std::move(image));
  }
  const std::vector<Batch> got = run_collate(fused, std::move(raw));
  const std::vector<Batch> expected = run_collate(plain, std::move(normalized));
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(expected.size(), 2u);
  for (std::size_t b = 0; b < got.size(); ++b) {
    ASSERT_EQ(got[b].size(), expected[b].size());
    const auto g = got[b].f32();
    const auto e = expected[b].f32();
    EXPECT_TRUE(std::equal(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(got[b].size() * floats.item_bytes() / 4),
                           e.begin()))
        << "batch " << b;
    for (std::size_t i = 0; i < got[b].size(); ++i) EXPECT_EQ(got[b].labels()[i], expected[b].labels()[i]);
  }
}

TEST(Collate, NormalizingIntoTheBatchRefusesWhatItCannotWrite) {
  const PixelNormalization n{.mean = {0.5f}, .stddev = {0.25f}, .range = 0};
  EXPECT_THROW(Collate(BatchPool(shape4, 1), {.normalize = n}), std::invalid_argument) << "u8 NHWC batches";
  const BatchShape floats{
      .batch_size = 2, .height = H, .width = W, .layout = BatchLayout::nchw, .pixel_type = ElementType::f32};
  Collate collate(BatchPool(floats, 1), {.normalize = n});
  Collector collector;
  graph::Emitter<Batch> out(collector);
  EXPECT_THROW(collate(make_f32(0), out), std::invalid_argument) << "items already float";
  EXPECT_THROW(collate(make_u8(0, 0, W + 1, H), out), std::invalid_argument) << "another size";
  EXPECT_EQ(collate.pending(), 0u);
}

TEST(Collate, RunsAsASerialOrderedStage) {
  EXPECT_EQ(Collate::stage_options().concurrency.max, 1);
  EXPECT_TRUE(Collate::stage_options().ordered);
}

// ---- in a pipeline -------------------------------------------------------------------------------

/// A source of `count` Images, indices 0..count-1.
auto image_source(std::uint64_t count) {
  return [i = std::uint64_t{0}, count]() mutable -> std::optional<Image> {
    if (i == count) return std::nullopt;
    return make_u8(i++);
  };
}

/// A parallel ordered "augment" stage that finishes items out of order (uneven work), so that
/// only the ordering keeps batches deterministic. Throws on item `fail_at`.
auto augment(std::uint64_t fail_at = ~std::uint64_t{0}) {
  return [fail_at](Image image) {
    if (image.index == fail_at) throw std::runtime_error("augment failed on " + image.name);
    if (image.index % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    return image;
  };
}

TEST(CollateInPipeline, BatchesArriveInOrderAndEverySlotReturns) {
  constexpr std::uint64_t count = 103;
  const BatchShape shape{.batch_size = 8, .height = H, .width = W};
  BatchPool pool(shape, 3);
  std::vector<std::uint64_t> seen;
  std::size_t batches = 0;
  std::size_t bad_items = 0;
  graph::Pipeline pipe({.max_in_flight = 32, .threads = 4});
  pipe.source("images", image_source(count))
      .map("augment", augment(), {.concurrency = graph::parallel(3), .ordered = true})
      .emit<Batch>("batch", Collate(pool), Collate::stage_options())
      .sink("check", [&](Batch batch) {
        ++batches;
        for (std::size_t i = 0; i < batch.size(); ++i) {
          const std::uint64_t index = batch.indices()[i];
          if (!holds_u8(batch, i, index) || batch.names()[i] != name_of(index)) ++bad_items;
          seen.push_back(index);
        }
      });
  const graph::RunReport report = pipe.run();

  EXPECT_EQ(batches, 13u);  // 12 full + a final 7
  ASSERT_EQ(seen.size(), count);
  for (std::uint64_t i = 0; i < count; ++i) ASSERT_EQ(seen[i], i) << "items out of order";
  EXPECT_EQ(bad_items, 0u);
  EXPECT_FALSE(report.cancelled);
  const BatchPoolStats stats = pool.stats();
  EXPECT_EQ(stats.free, 3u);
  EXPECT_LE(stats.peak_in_use, 3u);
  EXPECT_EQ(stats.acquired, 13u);
}

TEST(CollateInPipeline, DropLastInAPipeline) {
  BatchPool pool(BatchShape{.batch_size = 8, .height = H, .width = W}, 2);
  std::size_t items = 0;
  graph::Pipeline pipe({.max_in_flight = 16, .threads = 2});
  pipe.source("images", image_source(103))
      .emit<Batch>("batch", Collate(pool, {.drop_last = true}), Collate::stage_options())
      .sink("count", [&](Batch batch) {
        EXPECT_TRUE(batch.full());
        items += batch.size();
      });
  pipe.run();
  EXPECT_EQ(items, 96u);
  EXPECT_EQ(pool.stats().free, 2u);
}

enum class Thrower { augment, sink };

class CollateFailure : public ::testing::TestWithParam<Thrower> {};

// Whichever stage throws, run() rethrows it only once every batch is destroyed: the pool is whole
// while the Pipeline (and its Collate) still exist.
TEST_P(CollateFailure, EverySlotReturnsWhenAStageThrows) {
  const BatchShape shape{.batch_size = 4, .height = H, .width = W};
  BatchPool pool(shape, 3);
  std::atomic<int> sunk{0};
  const bool sink_throws = GetParam() == Thrower::sink;
  graph::Pipeline pipe({.max_in_flight = 24, .threads = 4});
  pipe.source("images", image_source(200))
      .map("augment", augment(sink_throws ? ~std::uint64_t{0} : 37),
           {.concurrency = graph::parallel(3), .ordered = true})
      .emit<Batch>("batch", Collate(pool), Collate::stage_options())
      .sink("train", [&](Batch batch) {
        if (sink_throws && batch.indices()[0] == 20) throw std::runtime_error("train step failed");
        sunk.fetch_add(static_cast<int>(batch.size()));
      });
  try {
    pipe.run();
    FAIL() << "run() did not rethrow";
  } catch (const graph::StageError& error) {
    EXPECT_EQ(error.stage(), sink_throws ? "train" : "augment");
  }
  EXPECT_LT(sunk.load(), 200);
  const BatchPoolStats stats = pool.stats();
  EXPECT_EQ(stats.free, 3u) << "a batch slot was stranded by the failed run";
  EXPECT_GE(stats.acquired, 1u);
}

std::string thrower_name(const ::testing::TestParamInfo<Thrower>& param) {
  return param.param == Thrower::augment ? "augment" : "sink";
}
INSTANTIATE_TEST_SUITE_P(Stages, CollateFailure, ::testing::Values(Thrower::augment, Thrower::sink), thrower_name);

// The batch stage waits for a slot without its thread. Before it did, this deadlocked: "hold"
// keeps each batch until the source's next call hands it on, so the sink's task is queued on the
// one pipeline thread while the batch stage, on that thread, waited in acquire() for its slot.
TEST(CollateInPipeline, OneThreadAndOneSlotCannotDeadlock) {
  BatchPool pool(BatchShape{.batch_size = 4, .height = H, .width = W}, 1);
  std::vector<std::pair<Batch, graph::Completion<Batch>>> held;  // touched on the one thread only
  std::vector<std::uint64_t> seen;
  graph::Pipeline pipe({.max_in_flight = 16, .threads = 1});
  pipe.source("images",
              [&, next = image_source(42)]() mutable {
                for (auto& [batch, done] : held) done(std::move(batch));
                held.clear();
                return next();
              })
      .emit<Batch>("batch", Collate(pool), Collate::stage_options())
      .async<Batch>("hold",
                    [&](Batch batch, graph::Completion<Batch> done) {
                      if (batch.full())
                        held.emplace_back(std::move(batch), std::move(done));
                      else
                        done(std::move(batch));  // the final partial batch: the source has ended
                    })
      .sink("collect", [&](Batch batch) {
        for (std::size_t i = 0; i < batch.size(); ++i) seen.push_back(batch.indices()[i]);
      });
  auto run = std::async(std::launch::async, [&] { return pipe.run(); });
  const bool finished = run.wait_for(60s) == std::future_status::ready;
  if (!finished) pool.close();  // unblocks a waiting acquire(), so that the test can end
  run.wait();
  ASSERT_TRUE(finished) << "the pipeline deadlocked on its one batch slot";
  EXPECT_NO_THROW(run.get());
  ASSERT_EQ(seen.size(), 42u);
  for (std::uint64_t i = 0; i < 42; ++i) EXPECT_EQ(seen[i], i);
  EXPECT_GT(pool.stats().waits, 0u) << "the stage never had to wait: the test did not test anything";
}

// A consumer that keeps every batch starves the pool; closing the pool turns the batch stage's
// endless wait (parked, without a thread) into an error, and run() returns instead of hanging.
TEST(CollateInPipeline, ClosingThePoolEndsARunBlockedOnIt) {
  BatchPool pool(BatchShape{.batch_size = 4, .height = H, .width = W}, 2);
  std::vector<Batch> kept;
  graph::Pipeline pipe({.max_in_flight = 16, .threads = 2});
  pipe.source("images", image_source(40))
      .emit<Batch>("batch", Collate(pool), Collate::stage_options())
      .sink("keep", [&](Batch batch) { kept.push_back(std::move(batch)); });
  std::thread closer([&] {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (pool.stats().waits == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(200us);
    pool.close();
  });
  try {
    pipe.run();
    FAIL() << "run() did not report the closed pool";
  } catch (const graph::StageError& error) {
    EXPECT_EQ(error.stage(), "batch");
    EXPECT_NE(std::string(error.what()).find("closed"), std::string::npos) << error.what();
  }
  closer.join();
  EXPECT_EQ(kept.size(), 2u);
  kept.clear();
  EXPECT_EQ(pool.stats().free, 2u);
}

}  // namespace
}  // namespace stoke::nodes
