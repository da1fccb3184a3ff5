// ColorJitter and its kernels: the blend formulas, rounding and clamping, identity cases, hue,
// torchvision's factor ranges and the random order of the adjustments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <stoke/nodes/color_jitter.hpp>
#include <string>

namespace stoke::nodes {
namespace {

cv::Mat random_image(cv::Size size, std::uint64_t seed) {
  cv::Mat image(size, CV_8UC3);
  cv::RNG rng(seed);
  rng.fill(image, cv::RNG::UNIFORM, 0, 256);
  return image;
}

bool same_bytes(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

bool is_constant(const cv::Mat& image, cv::Vec3b value) {
  return cv::norm(image, cv::Mat(image.size(), CV_8UC3, cv::Scalar(value[0], value[1], value[2])), cv::NORM_INF) == 0;
}

double luma(cv::Vec3b p) { return 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]; }

Image apply(const ColorJitter& jitter, cv::Mat pixels, std::uint64_t index = 0) {
  Image image{.pixels = std::move(pixels), .index = index, .name = {}};
  ItemRng rng(13, 0, index);
  jitter(image, rng);
  return image;
}

TEST(ColorJitterKernels, BrightnessOfAConstantImageIsTheRoundedProductClamped) {
  for (const int v : {0, 1, 3, 77, 128, 200, 255}) {
    for (const double f : {0.0, 0.5, 0.9, 1.0, 1.5, 2.0}) {
      const cv::Mat image(4, 6, CV_8UC3, cv::Scalar::all(v));
      const auto expected = static_cast<std::uint8_t>(std::clamp<long>(std::lround(v * f), 0, 255));
      EXPECT_TRUE(is_constant(adjust_brightness(image, f), cv::Vec3b::all(expected))) << v << " * " << f;
      // Through the transform, with a range that pins the factor.
      const ColorJitter jitter(ColorJitter::Ranges{.brightness = ColorJitter::Range{f, f}});
      EXPECT_TRUE(is_constant(apply(jitter, image).pixels, cv::Vec3b::all(expected))) << v << " * " << f;
    }
  }
}

TEST(ColorJitterKernels, ContrastZeroGivesTheConstantMeanGray) {
  const cv::Mat image = random_image({40, 30}, 1);
  double sum = 0;
  for (int y = 0; y < image.rows; ++y) {
    for (int x = 0; x < image.cols; ++x) sum += luma(image.at<cv::Vec3b>(y, x));
  }
  const auto mean = static_cast<std::uint8_t>(std::lround(sum / image.total()));
  EXPECT_TRUE(is_constant(adjust_contrast(image, 0.0), cv::Vec3b::all(mean)));
  const ColorJitter jitter(ColorJitter::Ranges{.contrast = ColorJitter::Range{0.0, 0.0}});
  EXPECT_TRUE(is_constant(apply(jitter, image).pixels, cv::Vec3b::all(mean)));
}

TEST(ColorJitterKernels, ContrastBlendsWithTheMeanAndClamps) {
  // Half 100, half 200 gray: mean 150; factor 3 -> 150 + 3 * (v - 150) = 0 and 300 -> 255.
  cv::Mat image(2, 2, CV_8UC3, cv::Scalar::all(100));
  image.row(1).setTo(cv::Scalar::all(200));
  const cv::Mat out = adjust_contrast(image, 3.0);
  EXPECT_EQ(out.at<cv::Vec3b>(0, 0), cv::Vec3b::all(0));
  EXPECT_EQ(out.at<cv::Vec3b>(1, 1), cv::Vec3b::all(255));
  const cv::Mat half = adjust_contrast(image, 0.5);  // 150 +- 25
  EXPECT_EQ(half.at<cv::Vec3b>(0, 1), cv::Vec3b::all(125));
  EXPECT_EQ(half.at<cv::Vec3b>(1, 0), cv::Vec3b::all(175));
}

TEST(ColorJitterKernels, SaturationZeroGivesEachPixelsGray) {
  const cv::Mat image = random_image({50, 20}, 2);
  const cv::Mat out = adjust_saturation(image, 0.0);
  for (int y = 0; y < image.rows; ++y) {
    for (int x = 0; x < image.cols; ++x) {
      const cv::Vec3b p = out.at<cv::Vec3b>(y, x);
      ASSERT_EQ(p[0], p[1]);
      ASSERT_EQ(p[1], p[2]);
      const double gray = luma(image.at<cv::Vec3b>(y, x));
      // Exact except within 0.01 of a tie, where the 14-bit fixed-point weights may tip it.
      if (std::abs(gray - std::floor(gray) - 0.5) > 0.01) {
        ASSERT_EQ(p[0], std::lround(gray)) << gray;
      }
    }
  }
}

TEST(ColorJitterKernels, SaturationAboveOneMovesAwayFromGray) {
  const cv::Mat image(1, 1, CV_8UC3, cv::Scalar(200, 100, 50));  // gray 0.299*200+0.587*100+0.114*50 = 124.2
  const cv::Vec3b p = adjust_saturation(image, 2.0).at<cv::Vec3b>(0, 0);
  EXPECT_EQ(p, cv::Vec3b(255, 76, 0));  // 2v - 124.2: 275.8 -> 255, 75.8 -> 76, -24.2 -> 0
}

TEST(ColorJitterKernels, FactorOneIsTheIdentityAndInputsAreNeverWritten) {
  const cv::Mat image = random_image({33, 17}, 3);
  const cv::Mat copy = image.clone();
  EXPECT_TRUE(same_bytes(adjust_brightness(image, 1.0), image));
  EXPECT_TRUE(same_bytes(adjust_contrast(image, 1.0), image));
  EXPECT_TRUE(same_bytes(adjust_saturation(image, 1.0), image));
  (void)adjust_brightness(image, 1.7);
  (void)adjust_contrast(image, 0.3);
  (void)adjust_saturation(image, 0.3);
  (void)adjust_hue(image, 0.2);
  EXPECT_TRUE(same_bytes(image, copy));
}

TEST(ColorJitterKernels, HueRotatesPrimariesAndKeepsGrays) {
  const cv::Mat red(1, 1, CV_8UC3, cv::Scalar(255, 0, 0));
  EXPECT_EQ(adjust_hue(red, 1.0 / 3.0).at<cv::Vec3b>(0, 0), cv::Vec3b(0, 255, 0));
  EXPECT_EQ(adjust_hue(red, -1.0 / 3.0).at<cv::Vec3b>(0, 0), cv::Vec3b(0, 0, 255));
  EXPECT_EQ(adjust_hue(red, 0.5).at<cv::Vec3b>(0, 0), cv::Vec3b(0, 255, 255));
  const cv::Mat gray(3, 3, CV_8UC3, cv::Scalar::all(90));
  EXPECT_TRUE(same_bytes(adjust_hue(gray, 0.3), gray));
  const cv::Mat image = random_image({16, 16}, 4);
  EXPECT_TRUE(same_bytes(adjust_hue(image, 0.0), image));
  EXPECT_LE(cv::norm(adjust_hue(adjust_hue(image, 0.2), -0.2), image, cv::NORM_INF), 2);
}

TEST(ColorJitterKernels, RejectOtherTypesAndNegativeFactors) {
  EXPECT_THROW(adjust_brightness(cv::Mat(2, 2, CV_8UC1, cv::Scalar(0)), 1.0), std::invalid_argument);
  EXPECT_THROW(adjust_contrast(cv::Mat(2, 2, CV_32FC3, cv::Scalar(0)), 1.0), std::invalid_argument);
  EXPECT_THROW(adjust_saturation(cv::Mat(2, 2, CV_8UC3, cv::Scalar(0)), -0.5), std::invalid_argument);
  EXPECT_THROW(adjust_hue(cv::Mat(2, 2, CV_8UC3, cv::Scalar(0)), 0.7), std::invalid_argument);
}

TEST(ColorJitter, ZeroJitterIsTheIdentityAndDrawsNothing) {
  const cv::Mat image = random_image({20, 20}, 5);
  for (const ColorJitter& jitter :
       {ColorJitter(0, 0, 0, 0),
        ColorJitter(ColorJitter::Ranges{.brightness = ColorJitter::Range{1, 1}, .hue = ColorJitter::Range{0, 0}})}) {
    EXPECT_FALSE(jitter.ranges().brightness.has_value());
    Image out{.pixels = image, .name = {}};
    ItemRng rng(1, 0, 0), untouched(1, 0, 0);
    jitter(out, rng);
    EXPECT_TRUE(same_bytes(out.pixels, image));
    EXPECT_EQ(rng(), untouched());
  }
}

TEST(ColorJitter, StrengthsBecomeTorchvisionFactorRanges) {
  const ColorJitter jitter(0.4, 1.5, 0.2, 0.1);
  ASSERT_TRUE(jitter.ranges().brightness && jitter.ranges().contrast && jitter.ranges().saturation &&
              jitter.ranges().hue);
  EXPECT_DOUBLE_EQ(jitter.ranges().brightness->min, 0.6);
  EXPECT_DOUBLE_EQ(jitter.ranges().brightness->max, 1.4);
  EXPECT_DOUBLE_EQ(jitter.ranges().contrast->min, 0.0);  // max(0, 1 - 1.5)
  EXPECT_DOUBLE_EQ(jitter.ranges().contrast->max, 2.5);
  EXPECT_DOUBLE_EQ(jitter.ranges().saturation->min, 0.8);
  EXPECT_DOUBLE_EQ(jitter.ranges().hue->min, -0.1);
  EXPECT_DOUBLE_EQ(jitter.ranges().hue->max, 0.1);
  EXPECT_FALSE(ColorJitter(0.3).ranges().contrast.has_value());
  EXPECT_EQ(ColorJitter(0.5).describe(), "color_jitter brightness=0.5:1.5 contrast=off saturation=off hue=off");
}

TEST(ColorJitter, AppliesTheEnabledAdjustmentsInARandomOrder) {
  // Gray rows of 200 and 0 (mean 100), brightness 2 and contrast 0:
  //   contrast first: 100 everywhere, then brightness: 200;
  //   brightness first: 255 and 0 (mean 127.5), then contrast: 128.
  cv::Mat image(2, 4, CV_8UC3, cv::Scalar::all(200));
  image.row(1).setTo(cv::Scalar::all(0));
  const ColorJitter jitter(
      ColorJitter::Ranges{.brightness = ColorJitter::Range{2, 2}, .contrast = ColorJitter::Range{0, 0}});
  std::map<int, int> outcomes;
  for (std::uint64_t i = 0; i < 400; ++i) {
    const cv::Mat out = apply(jitter, image, i).pixels;
    const int value = out.at<cv::Vec3b>(0, 0)[0];
    ASSERT_TRUE(is_constant(out, cv::Vec3b::all(static_cast<std::uint8_t>(value))));
    ++outcomes[value];
    ASSERT_TRUE(same_bytes(out, apply(jitter, image, i).pixels)) << "item " << i << " is not deterministic";
  }
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_GT(outcomes[200], 140);  // Binomial(400, 0.5): sd 10
  EXPECT_GT(outcomes[128], 140);
}

TEST(ColorJitter, FactorsAreDrawnFromTheirRanges) {
  // Brightness only, on a constant 100 image: the output is round(100 * f), f in [0.6, 1.4].
  const ColorJitter jitter(0.4);
  const cv::Mat image(2, 2, CV_8UC3, cv::Scalar::all(100));
  int lo = 255, hi = 0;
  for (std::uint64_t i = 0; i < 500; ++i) {
    const int v = apply(jitter, image, i).pixels.at<cv::Vec3b>(0, 0)[0];
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, 60);
  EXPECT_LE(lo, 62);
  EXPECT_LE(hi, 140);
  EXPECT_GE(hi, 138);
}

TEST(ColorJitter, RejectsBadParametersNamingThem) {
  const auto message = [](auto make) {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message([] { ColorJitter(-0.1); }), "color_jitter: brightness must be finite and >= 0, got -0.1");
  EXPECT_NE(message([] { ColorJitter(0, -1); }).find("color_jitter: contrast"), std::string::npos);
  EXPECT_NE(message([] { ColorJitter(0, 0, NAN); }).find("color_jitter: saturation"), std::string::npos);
  EXPECT_EQ(message([] { ColorJitter(0, 0, 0, 0.6); }), "color_jitter: hue must be in [0, 0.5], got 0.6");
  EXPECT_EQ(message([] {
              ColorJitter(ColorJitter::Ranges{.brightness = ColorJitter::Range{1.5, 0.5}});
            }),
            "color_jitter: brightness range must satisfy 0 <= min <= max, got 1.5:0.5");
  EXPECT_NE(message([] {
              ColorJitter(ColorJitter::Ranges{.hue = ColorJitter::Range{-0.7, 0.1}});
            }).find("hue"),
            std::string::npos);
}

}  // namespace
}  // namespace stoke::nodes
