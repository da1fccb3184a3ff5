// DecodeAugment: fused (plan the first transform's region, decode only that) and unfused (decode,
// then augment) must crop the same region and hand the same random numbers to later transforms.
#include "stoke/nodes/decode_augment.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "decode_test_support.hpp"
#include "stoke/graph/pipeline.hpp"
#include "stoke/nodes/random_resized_crop.hpp"
#include "stoke/nodes/resize.hpp"

namespace stoke::nodes {
namespace {

using test::make_sample;
using test::max_channel_mad;
using test::psnr;

// The agreement bounds of decode_fused_test.cpp (fused vs plain decoding of one region).
constexpr double kMaxMad = 6.0;
constexpr double kMinPsnr = 28.0;

// A random crop of 1/3 to all of each side, resized to `out`: fusable, like RandomResizedCrop.
class TestRandomCrop final : public Transform {
 public:
  explicit TestRandomCrop(cv::Size out) : out_(out) {}
  std::string_view name() const noexcept override { return "test_random_crop"; }
  std::optional<Region> plan(cv::Size source, ItemRng& rng) const override {
    const int w = static_cast<int>(rng.uniform_int(source.width / 3 + 1, source.width));
    const int h = static_cast<int>(rng.uniform_int(source.height / 3 + 1, source.height));
    const int x = static_cast<int>(rng.uniform_int(0, source.width - w));
    const int y = static_cast<int>(rng.uniform_int(0, source.height - h));
    return Region{cv::Rect(x, y, w, h), out_};
  }

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override {
    const Region region = *plan(image.pixels.size(), rng);
    image.pixels = resize_pixels(image.pixels(region.crop), region.out, Interpolation::bilinear);
  }

 private:
  cv::Size out_;
};

// A coin flip per item: mirrors the image horizontally on heads. Not fusable.
class TestFlip final : public Transform {
 public:
  std::string_view name() const noexcept override { return "test_flip"; }

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override {
    if (rng.bernoulli(0.5)) cv::flip(image.pixels, image.pixels, 1);
  }
};

// Brightens by a random amount. Not fusable.
class TestBrighten final : public Transform {
 public:
  std::string_view name() const noexcept override { return "test_brighten"; }

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override {
    image.pixels += cv::Scalar::all(static_cast<double>(rng.uniform_int(0, 40)));
  }
};

Sample jpeg_sample(std::uint64_t index, std::uint32_t epoch = 0) {
  static const std::vector<std::byte> jpeg = encode_jpeg(test::test_picture(640, 480), 90);
  Sample sample = make_sample(jpeg, "synthetic.jpg#" + std::to_string(index), index);
  sample.epoch = epoch;
  return sample;
}

TEST(DecodeAugment, FusedAndUnfusedTakeTheSameCropAndCoins) {
  const Augment augment({std::make_shared<TestRandomCrop>(cv::Size(96, 80)), std::make_shared<TestFlip>()}, 77);
  const DecodeAugment fused(Decoder(), augment, true);
  const DecodeAugment unfused(Decoder(), augment, false);
  EXPECT_TRUE(fused.fuse());
  EXPECT_FALSE(unfused.fuse());
  double control_psnr = 100;  // different items: what a wrong crop or coin looks like
  for (std::uint64_t index = 0; index < 24; ++index) {
    const Sample sample = jpeg_sample(index, 2);
    const Image a = fused(sample);
    const Image b = unfused(sample);
    ASSERT_EQ(a.pixels.size(), cv::Size(96, 80));
    ASSERT_EQ(b.pixels.size(), cv::Size(96, 80));
    EXPECT_LE(max_channel_mad(a.pixels, b.pixels), kMaxMad) << index;
    EXPECT_GE(psnr(a.pixels, b.pixels), kMinPsnr) << index;
    EXPECT_EQ(a.index, index);
    EXPECT_EQ(a.epoch, 2u);
    EXPECT_EQ(a.label, sample.label);
    EXPECT_EQ(a.name, sample.name);
    control_psnr = std::min(control_psnr, psnr(a.pixels, unfused(jpeg_sample(index + 100, 2)).pixels));
  }
  EXPECT_LT(control_psnr, kMinPsnr - 5);
}

TEST(DecodeAugment, UnfusableFirstTransformDecodesWholeAndMatchesExactly) {
  const Augment augment({std::make_shared<TestBrighten>(), std::make_shared<TestRandomCrop>(cv::Size(50, 50))}, 5);
  for (std::uint64_t index = 0; index < 6; ++index) {
    const Sample sample = jpeg_sample(index);
    EXPECT_EQ(cv::norm(DecodeAugment(Decoder(), augment)(sample).pixels,
                       DecodeAugment(Decoder(), augment, false)(sample).pixels, cv::NORM_INF),
              0);
  }
}

TEST(DecodeAugment, WithoutFuseItIsAugmentOfDecode) {
  const Augment augment({std::make_shared<TestRandomCrop>(cv::Size(64, 64)), std::make_shared<TestFlip>()}, 9);
  const Sample sample = jpeg_sample(3);
  EXPECT_EQ(cv::norm(DecodeAugment(Decoder(), augment, false)(sample).pixels, augment(Decoder().decode(sample)).pixels,
                     cv::NORM_INF),
            0);
  // No transforms: plain decoding either way.
  const Augment none({}, 9);
  EXPECT_EQ(cv::norm(DecodeAugment(Decoder(), none)(sample).pixels, Decoder().decode(sample).pixels, cv::NORM_INF), 0);
}

TEST(DecodeAugment, RawSamplesFuseExactly) {
  const cv::Mat source = test::test_picture(32, 32);
  Sample sample =
      make_sample(std::vector<std::byte>(reinterpret_cast<const std::byte*>(source.data),
                                         reinterpret_cast<const std::byte*>(source.data) + source.total() * 3),
                  "cifar#4", 4);
  sample.encoding = Encoding::raw_rgb;
  sample.width = 32;
  sample.height = 32;
  const Augment augment({std::make_shared<TestRandomCrop>(cv::Size(24, 24)), std::make_shared<TestFlip>()}, 1);
  EXPECT_EQ(cv::norm(DecodeAugment(Decoder(), augment)(sample).pixels,
                     DecodeAugment(Decoder(), augment, false)(sample).pixels, cv::NORM_INF),
            0);
}

TEST(DecodeAugment, OtherFormatsAreDecodedOnce) {
  std::atomic<int> calls = 0;
  DecodeOptions options;
  options.other_formats = [&](std::span<const std::byte>, const std::string&) {
    ++calls;
    return test::test_picture(8, 6);  // the fixture's size
  };
  const Augment augment({std::make_shared<TestRandomCrop>(cv::Size(4, 4))}, 3);
  const Sample png = make_sample(read_file(std::string(STOKE_TEST_DATA_DIR) + "/decode_tiny.png"), "tiny.png");
  const Image fused = DecodeAugment(Decoder(options), augment)(png);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cv::norm(fused.pixels, DecodeAugment(Decoder(options), augment, false)(png).pixels, cv::NORM_INF), 0);
}

TEST(DecodeAugment, RandomResizedCropFusesWithinTheDecodeBounds) {
  const Augment augment({std::make_shared<RandomResizedCrop>(cv::Size(224, 224)), std::make_shared<TestFlip>()}, 2024);
  const DecodeAugment fused(Decoder(), augment, true);
  const DecodeAugment unfused(Decoder(), augment, false);
  for (std::uint64_t index = 0; index < 16; ++index) {
    const Sample sample = jpeg_sample(index);
    const cv::Mat a = fused(sample).pixels;
    const cv::Mat b = unfused(sample).pixels;
    ASSERT_EQ(a.size(), cv::Size(224, 224));
    EXPECT_LE(max_channel_mad(a, b), kMaxMad) << index;
    EXPECT_GE(psnr(a, b), kMinPsnr) << index;
  }
}

TEST(DecodeAugment, PipelineResultsDoNotDependOnThreads) {
  const Augment augment({std::make_shared<TestRandomCrop>(cv::Size(48, 48)), std::make_shared<TestFlip>()}, 31);
  const auto run = [&](int threads) {
    std::vector<cv::Mat> out;
    graph::Pipeline pipe({.max_in_flight = 16, .threads = threads});
    std::uint64_t next = 0;
    pipe.source(
            "samples",
            [&]() -> std::optional<Sample> { return next < 40 ? std::optional(jpeg_sample(next++)) : std::nullopt; })
        .map("decode_augment", DecodeAugment(Decoder(), augment),
             graph::StageOptions{.concurrency = graph::parallel(threads), .ordered = true})
        .sink(
            "collect", [&](Image image) { out.push_back(image.pixels); }, graph::StageOptions{.ordered = true});
    pipe.run();
    return out;
  };
  const std::vector<cv::Mat> one = run(1);
  const std::vector<cv::Mat> four = run(4);
  ASSERT_EQ(one.size(), 40u);
  ASSERT_EQ(four.size(), 40u);
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_EQ(cv::norm(one[i], four[i], cv::NORM_INF), 0) << i;
}

}  // namespace
}  // namespace stoke::nodes
