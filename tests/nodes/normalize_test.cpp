// Normalize: exact values against the formula, CHW float output, refusal of normalized input.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <stoke/nodes/normalize.hpp>
#include <stoke/nodes/random_horizontal_flip.hpp>
#include <string>
#include <utility>
#include <vector>

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

TEST(Normalize, SaysItIsOnlyANormalizationAndOtherStepsDoNot) {
  const auto normalization = Normalize({0.5f, 0.25f}, {0.1f}, 4095).normalization();
  ASSERT_TRUE(normalization.has_value());
  EXPECT_EQ(normalization->mean, (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(normalization->stddev, std::vector<float>{0.1f});
  EXPECT_EQ(normalization->range, 4095.0f);
  EXPECT_FALSE(RandomHorizontalFlip().normalization().has_value());
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
  expect_bitwise_equal(apply(Normalize({mean.begin(), mean.end()}, {stddev.begin(), stddev.end()}), ramp).pixels,
                       reference(ramp, mean, stddev));
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
  const auto message = [](std::vector<float> mean, std::vector<float> stddev) {
    try {
      Normalize n(std::move(mean), std::move(stddev));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message({0.5f, 0.5f, 0.5f}, {0.2f, 0.0f, 0.2f}),
            "normalize: std must be finite and > 0, got 0.2,0,0.2 (channel 1)");
  EXPECT_NE(message({0.5f, 0.5f, 0.5f}, {0.2f, 0.2f, -1.0f}).find("normalize: std"), std::string::npos);
  EXPECT_NE(message({0.5f, NAN, 0.5f}, {0.2f, 0.2f, 0.2f}).find("normalize: mean"), std::string::npos);
  EXPECT_NE(message({}, {0.2f}).find("normalize: mean needs"), std::string::npos);
  EXPECT_THROW(Normalize({0.5f}, {0.2f}, -1.0f), std::invalid_argument);
  EXPECT_EQ(Normalize().describe(), "normalize mean=0.485,0.456,0.406 std=0.229,0.224,0.225");
  EXPECT_EQ(Normalize({0.5f}, {0.25f}, 4095).describe(), "normalize mean=0.5 std=0.25 range=4095");
}

/// The formula for any pixel type and channel count, with one value per channel or one for all.
template <class T>
cv::Mat reference_any(const cv::Mat& in, float range, const std::vector<float>& mean, const std::vector<float>& stddev) {
  const int channels = in.channels();
  cv::Mat out(channels * in.rows, in.cols, CV_32FC1);
  for (int c = 0; c < channels; ++c) {
    const float m = mean.size() == 1 ? mean[0] : mean[static_cast<std::size_t>(c)];
    const float s = stddev.size() == 1 ? stddev[0] : stddev[static_cast<std::size_t>(c)];
    for (int y = 0; y < in.rows; ++y)
      for (int x = 0; x < in.cols; ++x)
        out.at<float>(c * in.rows + y, x) = (static_cast<float>(in.ptr<T>(y)[x * channels + c]) / range - m) / s;
  }
  return out;
}

cv::Mat random_mat(cv::Size size, int type, double low, double high, std::uint64_t seed) {
  cv::Mat m(size, type);
  cv::RNG rng(seed);
  rng.fill(m, cv::RNG::UNIFORM, low, high);
  return m;
}

TEST(Normalize, AnyChannelCountWithOneValueEachOrOneForAll) {
  const cv::Mat grey = random_image({19, 11}, 5).reshape(1, 11).colRange(0, 19).clone();  // 1 channel
  ASSERT_EQ(grey.channels(), 1);
  const Image one = apply(Normalize(), grey);  // the RGB defaults serve grayscale: R's values
  EXPECT_EQ(one.planes, 1);
  EXPECT_EQ(one.channels(), 1);
  EXPECT_EQ(one.height(), 11);
  expect_bitwise_equal(one.pixels, reference_any<std::uint8_t>(grey, 255.0f, {0.485f}, {0.229f}));

  const cv::Mat five = random_mat({13, 7}, CV_8UC(5), 0, 256, 6);
  const std::vector<float> mean{0.1f, 0.2f, 0.3f, 0.4f, 0.5f}, stddev{0.5f};
  const Image out = apply(Normalize(mean, stddev), five);
  EXPECT_EQ(out.planes, 5);
  EXPECT_EQ(out.pixels.rows, 5 * 7);
  expect_bitwise_equal(out.pixels, reference_any<std::uint8_t>(five, 255.0f, mean, stddev));
}

TEST(Normalize, SixteenBitSignedAndFloatPixelsByTheirRange) {
  const cv::Mat u16 = random_mat({17, 9}, CV_16UC1, 0, 65536, 7);
  expect_bitwise_equal(apply(Normalize({0.5f}, {0.25f}), u16).pixels,
                       reference_any<std::uint16_t>(u16, 65535.0f, {0.5f}, {0.25f}));
  expect_bitwise_equal(apply(Normalize({0.5f}, {0.25f}, 4095), u16).pixels,
                       reference_any<std::uint16_t>(u16, 4095.0f, {0.5f}, {0.25f}));
  // CT in Hounsfield units: range 1 keeps the units, mean and std in HU.
  const cv::Mat hu = random_mat({17, 9}, CV_16SC1, -1024, 3072, 8);
  expect_bitwise_equal(apply(Normalize({40.0f}, {400.0f}, 1), hu).pixels,
                       reference_any<std::int16_t>(hu, 1.0f, {40.0f}, {400.0f}));
  expect_bitwise_equal(apply(Normalize({0.0f}, {1.0f}), hu).pixels,
                       reference_any<std::int16_t>(hu, 32767.0f, {0.0f}, {1.0f}));
  const cv::Mat f32 = random_mat({17, 9}, CV_32FC3, -2, 2, 9);
  const std::vector<float> mean{0.1f, -0.2f, 0.3f}, stddev{1.5f, 2.0f, 0.5f};
  expect_bitwise_equal(apply(Normalize(mean, stddev), f32).pixels, reference_any<float>(f32, 1.0f, mean, stddev));
}

// Found by transform_spec_fuzz (nodes/fuzz): "normalize mean=0.5,0.5,0.5,1.5" (four means, the
// three default stds) read past the end of the std list while making the uint8 tables.
TEST(Normalize, ListsOfDifferentLengthsServeTheChannelsBothGive) {
  const std::vector<float> mean{0.5f, 0.5f, 0.5f, 1.5f};
  const std::vector<float> stddev{Normalize::imagenet_std.begin(), Normalize::imagenet_std.end()};
  const Normalize normalize(mean, stddev);
  const cv::Mat rgb = random_image({6, 5}, 11);
  expect_bitwise_equal(apply(normalize, rgb).pixels,
                       reference(rgb, {0.5f, 0.5f, 0.5f}, Normalize::imagenet_std));
  Image four{.pixels = random_mat({4, 4}, CV_8UC(4), 0, 256, 12), .name = "four.png"};
  ItemRng rng(0, 0, 0);
  EXPECT_THROW(normalize(four, rng), std::invalid_argument);  // 3 stds for 4 channels
}

TEST(Normalize, RefusesTooFewValuesForTheChannelsNamingTheImage) {
  Image image{.pixels = random_mat({4, 4}, CV_8UC(4), 0, 256, 10), .name = "scan.png"};
  ItemRng rng(0, 0, 0);
  try {
    Normalize()(image, rng);  // 3 values for 4 channels
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("mean has 3 values for a 4-channel image (scan.png)"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace stoke::nodes
