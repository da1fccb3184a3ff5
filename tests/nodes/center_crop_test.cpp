// CenterCrop: torchvision's offsets (Python rounding) and zero padding; plan() only when no padding.
#include <gtest/gtest.h>

#include <cstdint>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <stoke/nodes/center_crop.hpp>
#include <string>

namespace stoke::nodes {
namespace {

/// Each pixel holds its own coordinates: (x % 256, y % 256, 7).
cv::Mat coordinate_image(cv::Size size) {
  cv::Mat image(size, CV_8UC3);
  for (int y = 0; y < size.height; ++y) {
    for (int x = 0; x < size.width; ++x) {
      image.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<std::uint8_t>(x), static_cast<std::uint8_t>(y), 7);
    }
  }
  return image;
}

Image apply(const Transform& t, cv::Mat pixels) {
  Image image{.pixels = std::move(pixels), .name = {}};
  ItemRng rng(0, 0, 0);
  t(image, rng);
  return image;
}

/// The (left, top) of the crop, read off the output's top-left pixel.
cv::Point origin(const cv::Mat& out) {
  const cv::Vec3b p = out.at<cv::Vec3b>(0, 0);
  return {p[0], p[1]};
}

TEST(CenterCrop, OffsetsFollowTorchvisionRounding) {
  const CenterCrop crop({224, 224});
  // 341x256 (Resize(256) of 500x375): left = round(117 / 2) = round(58.5) = 58 (half to even).
  Image out = apply(crop, coordinate_image({341, 256}));
  ASSERT_EQ(out.pixels.size(), cv::Size(224, 224));
  EXPECT_EQ(origin(out.pixels), cv::Point(58, 16));
  EXPECT_EQ(cv::norm(out.pixels, coordinate_image({341, 256})(cv::Rect(58, 16, 224, 224)), cv::NORM_INF), 0);

  EXPECT_EQ(origin(apply(crop, coordinate_image({225, 225})).pixels), cv::Point(0, 0));             // 0.5 -> 0
  EXPECT_EQ(origin(apply(crop, coordinate_image({227, 229})).pixels), cv::Point(2, 2));             // 1.5, 2.5 -> 2
  EXPECT_EQ(origin(apply(CenterCrop({3, 2}), coordinate_image({10, 9})).pixels), cv::Point(4, 4));  // 3.5 -> 4
}

TEST(CenterCrop, PlanIsTheCentredRectWhenTheImageIsLargeEnough) {
  const CenterCrop crop({224, 200});
  ItemRng rng(0, 0, 0);
  const std::optional<Region> region = crop.plan({341, 256}, rng);
  ASSERT_TRUE(region.has_value());
  EXPECT_EQ(region->crop, cv::Rect(58, 28, 224, 200));
  EXPECT_EQ(region->out, cv::Size(224, 200));
  EXPECT_FALSE(crop.plan({223, 256}, rng).has_value());
  EXPECT_FALSE(crop.plan({341, 199}, rng).has_value());
}

TEST(CenterCrop, PadsSmallerImagesWithZeros) {
  // 100x50 into 224x224: padded left (224-100)/2 = 62, top (224-50)/2 = 87.
  const cv::Mat source = coordinate_image({100, 50});
  const Image out = apply(CenterCrop({224, 224}), source);
  ASSERT_EQ(out.pixels.size(), cv::Size(224, 224));
  EXPECT_EQ(cv::norm(out.pixels(cv::Rect(62, 87, 100, 50)), source, cv::NORM_INF), 0);
  cv::Mat outside = out.pixels.clone();
  outside(cv::Rect(62, 87, 100, 50)).setTo(cv::Scalar::all(0));
  EXPECT_EQ(cv::countNonZero(outside.reshape(1)), 0);
}

TEST(CenterCrop, PadsOneSideAndCropsTheOther) {
  // 250x100 into 224x224: left = round(26 / 2) = 13 cropped; top padded by (224-100)/2 = 62.
  const cv::Mat source = coordinate_image({250, 100});
  const Image out = apply(CenterCrop({224, 224}), source);
  ASSERT_EQ(out.pixels.size(), cv::Size(224, 224));
  EXPECT_EQ(cv::norm(out.pixels(cv::Rect(0, 62, 224, 100)), source(cv::Rect(13, 0, 224, 100)), cv::NORM_INF), 0);
  EXPECT_EQ(cv::countNonZero(out.pixels(cv::Rect(0, 0, 224, 62)).reshape(1)), 0);
  EXPECT_EQ(cv::countNonZero(out.pixels(cv::Rect(0, 162, 224, 62)).reshape(1)), 0);
}

TEST(CenterCrop, OutputIsAContinuousCopy) {
  const cv::Mat source = coordinate_image({64, 64});
  const Image out = apply(CenterCrop({32, 32}), source);
  EXPECT_TRUE(out.pixels.isContinuous());
  EXPECT_NE(out.pixels.data, source.data);
}

TEST(CenterCrop, RejectsBadSizeNamingIt) {
  try {
    CenterCrop({0, 10});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "center_crop: size must be positive, got 0x10");
  }
  EXPECT_EQ(CenterCrop({224, 192}).describe(), "center_crop size=224x192");
}

}  // namespace
}  // namespace stoke::nodes
