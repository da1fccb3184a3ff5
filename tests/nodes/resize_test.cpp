// Resize: torchvision's output sizes, antialiased shrinking, plan() as a whole-image region.
#include <gtest/gtest.h>

#include <cstdint>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <stoke/nodes/resize.hpp>
#include <string>
#include <vector>

namespace stoke::nodes {
namespace {

Image apply(const Transform& t, cv::Mat pixels) {
  Image image{.pixels = std::move(pixels), .name = {}};
  ItemRng rng(0, 0, 0);
  t(image, rng);
  return image;
}

TEST(Resize, ShorterSideSizesMatchTorchvision) {
  const Resize resize(256);
  // torchvision: new_long = int(256 * long / short).
  EXPECT_EQ(resize.output_size({500, 375}), cv::Size(341, 256));
  EXPECT_EQ(resize.output_size({375, 500}), cv::Size(256, 341));
  EXPECT_EQ(resize.output_size({256, 256}), cv::Size(256, 256));
  EXPECT_EQ(resize.output_size({100, 100}), cv::Size(256, 256));
  EXPECT_EQ(Resize(224).output_size({333, 1000}), cv::Size(224, 672));  // 672.67 truncated
  EXPECT_EQ(Resize(224).output_size({1000, 333}), cv::Size(672, 224));
  EXPECT_EQ(Resize(7).output_size({3, 5}), cv::Size(7, 11));  // 11.67 truncated

  const Image out = apply(resize, cv::Mat(375, 500, CV_8UC3, cv::Scalar(1, 2, 3)));
  EXPECT_EQ(out.pixels.size(), cv::Size(341, 256));
  EXPECT_EQ(out.pixels.type(), CV_8UC3);
}

TEST(Resize, ExactSizeIsTakenAsIs) {
  const Resize resize(cv::Size(100, 50));
  EXPECT_EQ(resize.output_size({500, 375}), cv::Size(100, 50));
  EXPECT_EQ(apply(resize, cv::Mat(375, 500, CV_8UC3, cv::Scalar::all(9))).pixels.size(), cv::Size(100, 50));
}

TEST(Resize, PlanIsTheWholeImageAndDrawsNothing) {
  const Resize resize(256);
  ItemRng rng(1, 2, 3);
  const ItemRng before = rng;
  const std::optional<Region> region = resize.plan({500, 375}, rng);
  ASSERT_TRUE(region.has_value());
  EXPECT_EQ(region->crop, cv::Rect(0, 0, 500, 375));
  EXPECT_EQ(region->out, cv::Size(341, 256));
  ItemRng untouched = before;
  EXPECT_EQ(rng(), untouched());
}

TEST(Resize, ConstantImagesStayConstant) {
  for (const Interpolation interpolation : {Interpolation::bilinear, Interpolation::area, Interpolation::nearest}) {
    for (const cv::Size out : {cv::Size(40, 30), cv::Size(120, 100), cv::Size(400, 300), cv::Size(77, 301)}) {
      const Image image = apply(Resize(out, interpolation), cv::Mat(120, 160, CV_8UC3, cv::Scalar(10, 128, 250)));
      ASSERT_EQ(image.pixels.size(), out);
      EXPECT_EQ(cv::norm(image.pixels, cv::Mat(out, CV_8UC3, cv::Scalar(10, 128, 250)), cv::NORM_INF), 0) << out;
    }
  }
}

TEST(Resize, BilinearShrinkingAveragesInsteadOfAliasing) {
  // A one-pixel checkerboard shrunk 3x: point sampling (plain INTER_LINEAR hits pixel centres at
  // this ratio) would keep 0s and 255s; area averaging gives 4/9 or 5/9 of 255.
  cv::Mat board(300, 300, CV_8UC3);
  for (int y = 0; y < 300; ++y) {
    for (int x = 0; x < 300; ++x) board.at<cv::Vec3b>(y, x) = cv::Vec3b::all((x + y) % 2 ? 255 : 0);
  }
  const Image out = apply(Resize(cv::Size(100, 100)), board);
  double lo = 0, hi = 0;
  cv::minMaxLoc(out.pixels.reshape(1), &lo, &hi);
  EXPECT_GE(lo, 110);
  EXPECT_LE(hi, 145);
}

TEST(Resize, BilinearUsesAreaAveragingFromTwoXAndAreaForEveryShrink) {
  cv::Mat source(150, 300, CV_8UC3);
  cv::RNG(7).fill(source, cv::RNG::UNIFORM, 0, 256);
  const auto opencv = [&](cv::Size out, int flag) {
    cv::Mat dst;
    cv::resize(source, dst, out, 0, 0, flag);
    return dst;
  };
  const auto same = [](const cv::Mat& a, const cv::Mat& b) { return cv::norm(a, b, cv::NORM_INF) == 0; };
  // 1.5x both ways: bilinear stays INTER_LINEAR, area averages.
  EXPECT_TRUE(same(resize_pixels(source, {200, 100}, Interpolation::bilinear), opencv({200, 100}, cv::INTER_LINEAR)));
  EXPECT_TRUE(same(resize_pixels(source, {200, 100}, Interpolation::area), opencv({200, 100}, cv::INTER_AREA)));
  // 2x in width, 1.5x in height: both average.
  EXPECT_TRUE(same(resize_pixels(source, {150, 100}, Interpolation::bilinear), opencv({150, 100}, cv::INTER_AREA)));
  // Enlarging (in either direction) is INTER_LINEAR for both.
  EXPECT_TRUE(same(resize_pixels(source, {100, 200}, Interpolation::bilinear), opencv({100, 200}, cv::INTER_LINEAR)));
  EXPECT_TRUE(same(resize_pixels(source, {400, 200}, Interpolation::area), opencv({400, 200}, cv::INTER_LINEAR)));
  EXPECT_TRUE(same(resize_pixels(source, {40, 20}, Interpolation::nearest), opencv({40, 20}, cv::INTER_NEAREST)));
}

TEST(Resize, NearestRepeatsPixels) {
  cv::Mat small(2, 2, CV_8UC3);
  small.at<cv::Vec3b>(0, 0) = {1, 2, 3};
  small.at<cv::Vec3b>(0, 1) = {4, 5, 6};
  small.at<cv::Vec3b>(1, 0) = {7, 8, 9};
  small.at<cv::Vec3b>(1, 1) = {10, 11, 12};
  const Image out = apply(Resize(cv::Size(4, 4), Interpolation::nearest), small);
  for (int y = 0; y < 4; ++y) {
    for (int x = 0; x < 4; ++x) EXPECT_EQ(out.pixels.at<cv::Vec3b>(y, x), small.at<cv::Vec3b>(y / 2, x / 2));
  }
}

TEST(Resize, ResizePixelsCopiesAndNeverWritesTheSource) {
  cv::Mat source(60, 80, CV_8UC3, cv::Scalar(1, 2, 3));
  const cv::Mat roi = source(cv::Rect(10, 10, 40, 30));
  const cv::Mat same = resize_pixels(roi, roi.size(), Interpolation::bilinear);
  EXPECT_NE(same.data, roi.data);
  EXPECT_TRUE(same.isContinuous());
  EXPECT_EQ(cv::norm(same, roi, cv::NORM_INF), 0);
  EXPECT_THROW(resize_pixels(roi, {0, 5}, Interpolation::bilinear), std::invalid_argument);
  EXPECT_THROW(resize_pixels(cv::Mat(), {5, 5}, Interpolation::bilinear), std::invalid_argument);
}

// OpenCV's area filter stops at 4 channels; resize_pixels resamples wider images in groups. Each
// channel must come out as it does alone.
TEST(Resize, ImagesOfMoreThanFourChannelsResampleEachChannelAsAlone) {
  cv::Mat bands(30, 41, CV_16UC(7));
  cv::randu(bands, 0, 65535);
  for (const Interpolation interpolation : {Interpolation::bilinear, Interpolation::area, Interpolation::nearest}) {
    for (const cv::Size out : {cv::Size(13, 9), cv::Size(20, 15), cv::Size(50, 33)}) {
      const cv::Mat resized = resize_pixels(bands, out, interpolation);
      ASSERT_EQ(resized.type(), CV_16UC(7));
      ASSERT_EQ(resized.size(), out);
      std::vector<cv::Mat> alone;
      cv::split(bands, alone);
      std::vector<cv::Mat> got;
      cv::split(resized, got);
      for (int ch = 0; ch < 7; ++ch) {
        const cv::Mat expected = resize_pixels(alone[static_cast<std::size_t>(ch)], out, interpolation);
        EXPECT_EQ(cv::norm(expected, got[static_cast<std::size_t>(ch)], cv::NORM_INF), 0.0)
            << "channel " << ch << " to " << out << " with " << to_string(interpolation);
      }
    }
  }
}

TEST(Resize, RejectsBadParametersNamingThem) {
  EXPECT_THROW(Resize(0), std::invalid_argument);
  EXPECT_THROW(Resize(cv::Size(0, 5)), std::invalid_argument);
  try {
    Resize(-3);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "resize: size must be positive, got -3");
  }
  try {
    (void)parse_interpolation("cubic", "resize");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "resize: interpolation must be bilinear, area or nearest, got 'cubic'");
  }
  EXPECT_EQ(parse_interpolation("nearest", "resize"), Interpolation::nearest);
  EXPECT_EQ(parse_interpolation("area", "resize"), Interpolation::area);
  EXPECT_EQ(to_string(Interpolation::area), "area");
  EXPECT_EQ(to_string(Interpolation::bilinear), "bilinear");
}

TEST(Resize, DescribeListsTheParameters) {
  EXPECT_EQ(Resize(256).describe(), "resize size=256 interpolation=bilinear");
  EXPECT_EQ(Resize(cv::Size(64, 48), Interpolation::nearest).describe(), "resize size=64x48 interpolation=nearest");
}

}  // namespace
}  // namespace stoke::nodes
