// Normalize: exact values against the formula, CHW float output, refusal of normalized input.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <stoke/nodes/normalize.hpp>
#include <string>

namespace stoke::nodes {
namespace {

cv::Mat random_image(cv::Size size, std::uint64_t seed) {
  cv::Mat image(size, CV_8UC3);
  cv::RNG rng(seed);
  rng.fill(image, cv::RNG::UNIFORM, 0, 256);
  return image;
}

/// The straightforward loop: out[c][y][x] = (in[y][x][c] / 255 - mean[c]) / std[c] in float.
cv::Mat reference(const cv::Mat& in, const std::array<float, 3>& mean, const std::array<float, 3>& stddev) {
  cv::Mat out(3 * in.rows, in.cols, CV_32FC1);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < in.rows; ++y) {
      for (int x = 0; x < in.cols; ++x) {
        out.at<float>(c * in.rows + y, x) =
            (static_cast<float>(in.at<cv::Vec3b>(y, x)[c]) / 255.0f - mean[c]) / stddev[c];
      }
    }
  }
  return out;
}

void expect_bitwise_equal(const cv::Mat& actual, const cv::Mat& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  ASSERT_EQ(actual.type(), expected.type());
  int mismatches = 0;
  for (int r = 0; r < actual.rows; ++r) {
    for (int x = 0; x < actual.cols; ++x) mismatches += actual.at<float>(r, x) != expected.at<float>(r, x) ? 1 : 0;
  }
  EXPECT_EQ(mismatches, 0);
}

Image apply(const Normalize& normalize, cv::Mat pixels) {
  Image image{.pixels = std::move(pixels), .name = {}};
  ItemRng rng(0, 0, 0);
  normalize(image, rng);
  return image;
}

TEST(Normalize, ValuesEqualTheFormulaExactly) {
  const cv::Mat source = random_image({37, 23}, 1);
  const Image out = apply(Normalize(), source);
  expect_bitwise_equal(out.pixels, reference(source, Normalize::imagenet_mean, Normalize::imagenet_std));
  // Spot check against the ImageNet constants written out.
  const float r = source.at<cv::Vec3b>(5, 7)[0];
  EXPECT_FLOAT_EQ(out.pixels.at<float>(5, 7), (r / 255.0f - 0.485f) / 0.229f);
}

TEST(Normalize, MatchesTorchvisionToTensorAndNormalizeBitForBit) {
  // torchvision 0.14: Normalize(imagenet mean, std)(x.float().div(255)) for x = 0, 77, 128, 255,
  // printed with float.hex().
  const float expected[3][4] = {
      {-0x1.0f177ap+1f, -0x1.993d92p-1f, 0x1.2f5e64p-4f, 0x1.1fdc3ap+1f},
      {-0x1.049248p+1f, -0x1.6016fp-1f, 0x1.a4369p-3f, 0x1.36db6ep+1f},
      {-0x1.cdf012p+0f, -0x1.d97e72p-2f, 0x1.b4ba78p-2f, 0x1.51eb86p+1f},
  };
  cv::Mat row(1, 4, CV_8UC3);
  const int values[4] = {0, 77, 128, 255};
  for (int x = 0; x < 4; ++x) row.at<cv::Vec3b>(0, x) = cv::Vec3b::all(static_cast<std::uint8_t>(values[x]));
  const Image out = apply(Normalize(), row);
  for (int c = 0; c < 3; ++c) {
    for (int x = 0; x < 4; ++x)
      EXPECT_EQ(out.pixels.at<float>(c, x), expected[c][x]) << "channel " << c << " value " << values[x];
  }
}

TEST(Normalize, EveryByteValueOfEveryChannelIsExact) {
  cv::Mat ramp(1, 256, CV_8UC3);
  for (int v = 0; v < 256; ++v) {
    ramp.at<cv::Vec3b>(0, v) = cv::Vec3b(static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(255 - v),
                                         static_cast<std::uint8_t>(v ^ 0x5a));
  }
  const std::array<float, 3> mean{0.5f, 0.25f, 0.0f}, stddev{0.5f, 2.0f, 1.0f};
  expect_bitwise_equal(apply(Normalize(mean, stddev), ramp).pixels, reference(ramp, mean, stddev));
}

TEST(Normalize, OutputIsFloatChwOfTheSameImageSize) {
  const Image out = apply(Normalize(), random_image({31, 17}, 2));
  EXPECT_EQ(out.layout, PixelLayout::chw_f32);
  EXPECT_EQ(out.pixels.type(), CV_32FC1);
  EXPECT_EQ(out.pixels.rows, 3 * 17);
  EXPECT_EQ(out.pixels.cols, 31);
  EXPECT_EQ(out.width(), 31);
  EXPECT_EQ(out.height(), 17);
  EXPECT_TRUE(out.pixels.isContinuous());
}

TEST(Normalize, ReadsNonContinuousInputRowByRow) {
  const cv::Mat big = random_image({64, 48}, 3);
  const cv::Mat roi = big(cv::Rect(5, 6, 33, 21));
  ASSERT_FALSE(roi.isContinuous());
  expect_bitwise_equal(apply(Normalize(), roi).pixels,
                       reference(roi.clone(), Normalize::imagenet_mean, Normalize::imagenet_std));
}

TEST(Normalize, RefusesAnAlreadyNormalizedImageWithAClearMessage) {
  const Normalize normalize;
  Image image = apply(normalize, random_image({8, 8}, 4));
  ItemRng rng(0, 0, 0);
  try {
    normalize(image, rng);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("normalize: ", 0), 0u) << message;
    EXPECT_NE(message.find("already normalized"), std::string::npos) << message;
  }
  EXPECT_FALSE(normalize.accepts(PixelLayout::chw_f32));
}

TEST(Normalize, RejectsBadMeanAndStdNamingThem) {
  const auto message = [](std::array<float, 3> mean, std::array<float, 3> stddev) {
    try {
      Normalize n(mean, stddev);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message({0.5f, 0.5f, 0.5f}, {0.2f, 0.0f, 0.2f}),
            "normalize: std must be finite and > 0, got 0.2,0,0.2 (channel G)");
  EXPECT_NE(message({0.5f, 0.5f, 0.5f}, {0.2f, 0.2f, -1.0f}).find("normalize: std"), std::string::npos);
  EXPECT_NE(message({0.5f, NAN, 0.5f}, {0.2f, 0.2f, 0.2f}).find("normalize: mean"), std::string::npos);
  EXPECT_EQ(Normalize().describe(), "normalize mean=0.485,0.456,0.406 std=0.229,0.224,0.225");
}

}  // namespace
}  // namespace stoke::nodes
