// The fields beside the pixels through the transforms: a mask follows every geometric transform
// (checked against the geometry the image itself went through), photometric transforms leave it,
// 16-bit and signed pixels survive the geometric steps bit for bit where nothing is resampled,
// and fields that do not fit together are refused naming the item.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <stoke/nodes/center_crop.hpp>
#include <stoke/nodes/color_jitter.hpp>
#include <stoke/nodes/image.hpp>
#include <stoke/nodes/random_horizontal_flip.hpp>
#include <stoke/nodes/random_resized_crop.hpp>
#include <stoke/nodes/resize.hpp>
#include <stoke/nodes/transform.hpp>
#include <string>
#include <vector>

namespace stoke::nodes {
namespace {

constexpr int kWidth = 97;
constexpr int kHeight = 61;

/// Pixels that say where they are: channel 0 = x, channel 1 = y (float). Bilinear and area
/// resampling of a linear ramp reproduce it, so after a transform each output pixel tells the
/// source position (in pixel-index units) the image's geometry sampled it from.
cv::Mat ramp_pixels() {
  cv::Mat pixels(kHeight, kWidth, CV_32FC2);
  for (int y = 0; y < kHeight; ++y)
    for (int x = 0; x < kWidth; ++x) pixels.at<cv::Vec2f>(y, x) = cv::Vec2f(static_cast<float>(x), static_cast<float>(y));
  return pixels;
}

/// A mask of class ids that are also positions: id = y * kWidth + x (int32).
cv::Mat id_mask() {
  cv::Mat mask(kHeight, kWidth, CV_32SC1);
  for (int y = 0; y < kHeight; ++y)
    for (int x = 0; x < kWidth; ++x) mask.at<std::int32_t>(y, x) = y * kWidth + x;
  return mask;
}

Image ramp_image() { return Image{.pixels = ramp_pixels(), .mask = id_mask(), .index = 3, .name = "ramp"}; }

/// For every output pixel away from the border (where bilinear clamps), the mask's source pixel
/// must be the one nearest to where the image was sampled: |mask position - image position| <= 0.5
/// on each axis. Returns the number of pixels that disagree.
int disagreements(const Image& out, bool exact_ramp) {
  EXPECT_EQ(out.mask.size(), out.pixels.size());
  EXPECT_EQ(out.mask.type(), CV_32SC1) << "the mask keeps its type";
  int bad = 0;
  for (int y = 1; y + 1 < out.pixels.rows; ++y) {
    for (int x = 1; x + 1 < out.pixels.cols; ++x) {
      const cv::Vec2f at = out.pixels.at<cv::Vec2f>(y, x);
      const int id = out.mask.at<std::int32_t>(y, x);
      const int mx = id % kWidth, my = id / kWidth;
      const double tolerance = exact_ramp ? 0.0 : 0.5 + 1e-3;
      if (std::abs(mx - static_cast<double>(at[0])) > tolerance || std::abs(my - static_cast<double>(at[1])) > tolerance) ++bad;
    }
  }
  return bad;
}

Image apply(const Transform& t, Image image, std::uint64_t seed) {
  ItemRng rng(seed, 0, image.index);
  t(image, rng);
  return image;
}

TEST(ImageFields, TheMaskFollowsRandomResizedCropToTheSamplePositionOfTheImage) {
  const RandomResizedCrop crop(cv::Size(40, 30), {0.1, 1.0}, {0.5, 2.0});
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const Image out = apply(crop, ramp_image(), seed);
    ASSERT_EQ(out.pixels.size(), cv::Size(40, 30));
    EXPECT_EQ(disagreements(out, false), 0) << "seed " << seed;
  }
}

TEST(ImageFields, TheMaskFollowsResizeUpAndDown) {
  for (const cv::Size size : {cv::Size(40, 25), cv::Size(150, 90), cv::Size(23, 80)}) {
    const Image out = apply(Resize(size), ramp_image(), 0);
    EXPECT_EQ(disagreements(out, false), 0) << size;
  }
  const Image shorter = apply(Resize(30), ramp_image(), 0);  // shorter side 30: 47x30
  EXPECT_EQ(shorter.mask.size(), cv::Size(47, 30));
  EXPECT_EQ(disagreements(shorter, false), 0);
}

TEST(ImageFields, TheMaskFollowsFlipAndCenterCropExactly) {
  const Image flipped = apply(RandomHorizontalFlip(1.0), ramp_image(), 0);
  EXPECT_EQ(disagreements(flipped, true), 0);
  EXPECT_EQ(flipped.mask.at<std::int32_t>(0, 0), kWidth - 1) << "the left column came from the right";
  const Image cropped = apply(CenterCrop(cv::Size(50, 40)), ramp_image(), 0);
  EXPECT_EQ(disagreements(cropped, true), 0);
  // torchvision's offsets: round((97 - 50) / 2) = 24 (half to even: 23.5 -> 24), round(21 / 2) = 10.
  EXPECT_EQ(cropped.mask.at<std::int32_t>(0, 0), 10 * kWidth + 24);
}

TEST(ImageFields, CenterCropPadsTheMaskWithClassZero) {
  const Image out = apply(CenterCrop(cv::Size(101, 65)), ramp_image(), 0);
  ASSERT_EQ(out.mask.size(), cv::Size(101, 65));
  // Pad of (101 - 97) / 2 = 2 columns and (65 - 61) / 2 = 2 rows on the top left.
  EXPECT_EQ(out.mask.at<std::int32_t>(0, 0), 0);
  EXPECT_EQ(out.mask.at<std::int32_t>(2, 1), 0);
  EXPECT_EQ(out.mask.at<std::int32_t>(2, 2), 0) << "source (0, 0), whose id is 0 too";
  EXPECT_EQ(out.mask.at<std::int32_t>(3, 3), kWidth + 1);
  EXPECT_EQ(out.mask.at<std::int32_t>(64, 100), 0);
}

TEST(ImageFields, PhotometricStepsLeaveTheMaskAndTargets) {
  cv::Mat rgb(kHeight, kWidth, CV_8UC3);
  cv::randu(rgb, 0, 256);
  Image image{.pixels = rgb, .mask = id_mask(), .targets = {{"age", Target{{}, {41.5f}}}}, .name = "photo"};
  const cv::Mat mask_before = image.mask.clone();
  const Image out = apply(ColorJitter(0.4, 0.4, 0.4, 0.1), image, 5);
  EXPECT_EQ(cv::countNonZero(out.mask != mask_before), 0);
  EXPECT_EQ(out.targets.at("age"), (Target{{}, {41.5f}}));
}

/// Random pixels of `type`.
cv::Mat random_mat(int type, std::uint64_t seed, double low, double high) {
  cv::Mat m(kHeight, kWidth, type);
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, low, high);
  return m;
}

TEST(ImageFields, SixteenBitAndSignedPixelsSurviveCropAndFlipBitForBit) {
  for (const auto& [type, low, high] : {std::tuple{CV_16UC1, 0.0, 65536.0}, std::tuple{CV_16SC1, -32768.0, 32768.0},
                                        std::tuple{CV_16UC3, 0.0, 65536.0}, std::tuple{CV_32FC(5), -1e6, 1e6}}) {
    const cv::Mat source = random_mat(type, 11, low, high);
    Image cropped = apply(CenterCrop(cv::Size(50, 40)), Image{.pixels = source, .name = "scan"}, 0);
    ASSERT_EQ(cropped.pixels.type(), type);
    EXPECT_EQ(cv::norm(cropped.pixels, source(cv::Rect(24, 10, 50, 40)), cv::NORM_INF), 0.0) << type;
    const Image flipped = apply(RandomHorizontalFlip(1.0), Image{.pixels = source, .name = "scan"}, 0);
    cv::Mat expected;
    cv::flip(source, expected, 1);
    EXPECT_EQ(cv::norm(flipped.pixels, expected, cv::NORM_INF), 0.0) << type;
    // A resize to the same size resamples nothing.
    const Image same = apply(Resize(cv::Size(kWidth, kHeight)), Image{.pixels = source, .name = "scan"}, 0);
    EXPECT_EQ(cv::norm(same.pixels, source, cv::NORM_INF), 0.0) << type;
  }
}

TEST(ImageFields, ResamplingKeepsThePixelTypeAndChannels) {
  for (const int type : {CV_16UC1, CV_16SC1, CV_32FC(5), CV_8UC(4)}) {
    const Image out = apply(RandomResizedCrop(cv::Size(32, 24)), Image{.pixels = random_mat(type, 3, 0, 200)}, 1);
    EXPECT_EQ(out.pixels.type(), type);
    EXPECT_EQ(out.pixels.size(), cv::Size(32, 24));
  }
}

/// The message of what `f` throws as std::invalid_argument, or "no exception".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no exception";
}

TEST(ImageFields, FieldsThatDoNotFitAreRefusedNamingTheItem) {
  const Resize resize(cv::Size(20, 20));
  Image wrong_size{.pixels = ramp_pixels(), .mask = cv::Mat(10, 10, CV_8UC1, cv::Scalar(0)), .name = "a.png"};
  EXPECT_EQ(error_of([&] { apply(resize, wrong_size, 0); }), "resize: a.png: the mask is 10x10 but the image is 97x61");
  Image rgb_mask{.pixels = ramp_pixels(), .mask = cv::Mat(kHeight, kWidth, CV_8UC3), .name = "b.png"};
  EXPECT_NE(error_of([&] { apply(resize, rgb_mask, 0); }).find("resize: b.png: the mask is uint8 3-channel"),
            std::string::npos);
  Image bad_target{.pixels = ramp_pixels(), .targets = {{"labels", Target{{4}, {1, 0, 1}}}}, .index = 9};
  EXPECT_EQ(error_of([&] { apply(resize, bad_target, 0); }),
            "resize: item 9: target 'labels' has 3 values for a shape of 4");
  Image int_pixels{.pixels = cv::Mat(4, 4, CV_32SC1, cv::Scalar(1)), .name = "c"};
  EXPECT_NE(error_of([&] { apply(resize, int_pixels, 0); }).find("an image holds uint8, uint16, int16 or float32"),
            std::string::npos);
}

TEST(ImageFields, ColorJitterSaysItTakesEightBitRgbOnly) {
  Image grey{.pixels = cv::Mat(8, 8, CV_8UC1, cv::Scalar(7)), .name = "xray.png"};
  EXPECT_EQ(error_of([&] { apply(ColorJitter(0.4, 0, 0, 0), grey, 0); }),
            "color_jitter: takes 8-bit RGB images, got uint8 1-channel 8x8 (colour jitter is for photos; leave it out "
            "for other data)");
}

}  // namespace
}  // namespace stoke::nodes
