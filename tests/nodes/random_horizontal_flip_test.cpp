// RandomHorizontalFlip: probability, one draw per item, determinism, both pixel layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <stoke/nodes/random_horizontal_flip.hpp>
#include <string>

namespace stoke::nodes {
namespace {

/// A 5x2 image whose columns are all different.
cv::Mat asymmetric_image() {
  cv::Mat image(2, 5, CV_8UC3);
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 5; ++x) {
      image.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<std::uint8_t>(10 * x + y), static_cast<std::uint8_t>(x), 3);
    }
  }
  return image;
}

cv::Mat mirrored(const cv::Mat& image) {
  cv::Mat out(image.size(), image.type());
  for (int y = 0; y < image.rows; ++y) {
    for (int x = 0; x < image.cols; ++x) image.row(y).col(image.cols - 1 - x).copyTo(out.row(y).col(x));
  }
  return out;
}

bool same_bytes(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

/// Applies `flip` to item `index`; returns whether it mirrored the image.
bool flips(const RandomHorizontalFlip& flip, std::uint64_t index) {
  const cv::Mat source = asymmetric_image();
  Image image{.pixels = source, .name = {}};
  ItemRng rng(21, 0, index);
  flip(image, rng);
  if (same_bytes(image.pixels, mirrored(source))) return true;
  EXPECT_TRUE(same_bytes(image.pixels, source)) << "neither the image nor its mirror";
  return false;
}

TEST(RandomHorizontalFlip, ProbabilityZeroNeverFlipsAndOneAlwaysMirrors) {
  const RandomHorizontalFlip never(0.0), always(1.0);
  for (std::uint64_t i = 0; i < 300; ++i) {
    ASSERT_FALSE(flips(never, i)) << i;
    ASSERT_TRUE(flips(always, i)) << i;
  }
}

TEST(RandomHorizontalFlip, HalfTheItemsFlipAtOneHalf) {
  const RandomHorizontalFlip flip(0.5);
  int flipped = 0;
  for (std::uint64_t i = 0; i < 2000; ++i) flipped += flips(flip, i) ? 1 : 0;
  // Binomial(2000, 0.5): sd 22.4; a 5 sd band.
  EXPECT_GT(flipped, 888);
  EXPECT_LT(flipped, 1112);
}

TEST(RandomHorizontalFlip, DecisionIsAFunctionOfTheItem) {
  const RandomHorizontalFlip flip(0.5);
  int changes = 0;
  for (std::uint64_t i = 0; i < 200; ++i) {
    const bool first = flips(flip, i);
    ASSERT_EQ(first, flips(flip, i)) << i;
    changes += first != flips(flip, i + 1) ? 1 : 0;
  }
  EXPECT_GT(changes, 50);  // not the same decision for every item
}

TEST(RandomHorizontalFlip, DrawsExactlyOneNumberWhateverP) {
  for (const double p : {0.0, 0.3, 1.0}) {
    const RandomHorizontalFlip flip(p);
    Image image{.pixels = asymmetric_image(), .name = {}};
    ItemRng rng(4, 0, 7), expected(4, 0, 7);
    flip(image, rng);
    expected();
    EXPECT_EQ(rng(), expected()) << "p = " << p;
  }
}

TEST(RandomHorizontalFlip, MirrorsEveryPlaneOfANormalizedImage) {
  // 3 planes of 2x4 floats, all values different.
  cv::Mat planes(6, 4, CV_32FC1);
  for (int r = 0; r < 6; ++r) {
    for (int x = 0; x < 4; ++x) planes.at<float>(r, x) = static_cast<float>(10 * r + x) + 0.25f;
  }
  const cv::Mat source = planes.clone();
  const RandomHorizontalFlip flip(1.0);
  ASSERT_TRUE(flip.accepts(PixelLayout::chw_f32));
  Image image{.pixels = planes, .layout = PixelLayout::chw_f32, .name = {}};
  ItemRng rng(0, 0, 0);
  flip(image, rng);
  EXPECT_EQ(image.layout, PixelLayout::chw_f32);
  EXPECT_TRUE(same_bytes(image.pixels, mirrored(source)));
  EXPECT_TRUE(same_bytes(planes, source));  // the input buffer was not written
}

TEST(RandomHorizontalFlip, RejectsProbabilitiesOutsideZeroToOne) {
  EXPECT_THROW(RandomHorizontalFlip(-0.1), std::invalid_argument);
  EXPECT_THROW(RandomHorizontalFlip(std::nan("")), std::invalid_argument);
  try {
    RandomHorizontalFlip(1.5);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "random_horizontal_flip: p must be in [0, 1], got 1.5");
  }
  EXPECT_EQ(RandomHorizontalFlip(0.25).describe(), "random_horizontal_flip p=0.25");
}

}  // namespace
}  // namespace stoke::nodes
