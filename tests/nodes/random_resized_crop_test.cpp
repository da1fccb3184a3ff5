// RandomResizedCrop: torchvision's get_params (ranges, draw order, fallback), determinism per item,
// and agreement between plan() and apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <opencv2/core.hpp>
#include <set>
#include <stdexcept>
#include <stoke/nodes/random_resized_crop.hpp>
#include <stoke/nodes/transform.hpp>
#include <string>
#include <tuple>

namespace stoke::nodes {
namespace {

/// Random RGB pixels, a function of `seed`.
cv::Mat random_image(cv::Size size, std::uint64_t seed) {
  cv::Mat image(size, CV_8UC3);
  cv::RNG rng(seed);
  rng.fill(image, cv::RNG::UNIFORM, 0, 256);
  return image;
}

/// Each pixel holds its own coordinates: R = x % 256, G = y % 256, B = x / 256 + 16 * (y / 256).
cv::Mat coordinate_image(cv::Size size) {
  cv::Mat image(size, CV_8UC3);
  for (int y = 0; y < size.height; ++y) {
    for (int x = 0; x < size.width; ++x) {
      image.at<cv::Vec3b>(y, x) = cv::Vec3b(static_cast<std::uint8_t>(x % 256), static_cast<std::uint8_t>(y % 256),
                                            static_cast<std::uint8_t>(x / 256 + 16 * (y / 256)));
    }
  }
  return image;
}

cv::Point decode_coordinates(cv::Vec3b pixel) {
  return {pixel[0] + 256 * (pixel[2] % 16), pixel[1] + 256 * (pixel[2] / 16)};
}

bool same_bytes(const cv::Mat& a, const cv::Mat& b) {
  return a.size() == b.size() && a.type() == b.type() && cv::norm(a, b, cv::NORM_INF) == 0;
}

TEST(RandomResizedCrop, CropsStayInsideAndFollowTheScaleAndRatioRanges) {
  const RandomResizedCrop crop({224, 224});
  const cv::Size source(640, 480);
  const double area = 640.0 * 480.0;
  double min_fraction = 1, max_fraction = 0, min_aspect = 10, max_aspect = 0;
  for (std::uint64_t i = 0; i < 4000; ++i) {
    ItemRng rng(11, 0, i);
    const cv::Rect r = crop.crop_for(source, rng);
    ASSERT_GT(r.width, 0);
    ASSERT_GT(r.height, 0);
    ASSERT_GE(r.x, 0);
    ASSERT_GE(r.y, 0);
    ASSERT_LE(r.x + r.width, source.width);
    ASSERT_LE(r.y + r.height, source.height);
    // Rounding w and h to whole pixels moves the area and aspect by at most half a pixel a side.
    const double fraction = r.area() / area;
    const double aspect = static_cast<double>(r.width) / r.height;
    const double slack = 0.5 / std::min(r.width, r.height);
    ASSERT_GE(fraction, 0.08 * (1 - slack) * (1 - slack)) << r;
    ASSERT_LE(fraction, 1.0) << r;
    ASSERT_GE(aspect, 0.75 * (1 - slack) / (1 + slack)) << r;
    ASSERT_LE(aspect, 4.0 / 3.0 * (1 + slack) / (1 - slack)) << r;
    min_fraction = std::min(min_fraction, fraction);
    max_fraction = std::max(max_fraction, fraction);
    min_aspect = std::min(min_aspect, aspect);
    max_aspect = std::max(max_aspect, aspect);
  }
  // The whole of both ranges is used.
  EXPECT_LT(min_fraction, 0.09);
  EXPECT_GT(max_fraction, 0.95);
  EXPECT_LT(min_aspect, 0.77);
  EXPECT_GT(max_aspect, 1.30);
}

TEST(RandomResizedCrop, FollowsTorchvisionGetParamsDrawByDraw) {
  // An independent transcription of torchvision's get_params, fed the same stream.
  const auto reference = [](cv::Size source, ItemRng rng) {
    const double area = static_cast<double>(source.width) * source.height;
    for (int attempt = 0; attempt < 10; ++attempt) {
      const double target_area = area * rng.uniform(0.3, 0.9);
      const double aspect = std::exp(rng.uniform(std::log(0.5), std::log(2.0)));
      const int w = static_cast<int>(std::nearbyint(std::sqrt(target_area * aspect)));
      const int h = static_cast<int>(std::nearbyint(std::sqrt(target_area / aspect)));
      if (0 < w && w <= source.width && 0 < h && h <= source.height) {
        const auto top = static_cast<int>(rng.uniform_int(0, source.height - h));
        const auto left = static_cast<int>(rng.uniform_int(0, source.width - w));
        return cv::Rect(left, top, w, h);
      }
    }
    const double in_ratio = static_cast<double>(source.width) / source.height;
    int w = source.width, h = source.height;
    if (in_ratio < 0.5) {
      h = static_cast<int>(std::nearbyint(w / 0.5));
    } else if (in_ratio > 2.0) {
      w = static_cast<int>(std::nearbyint(h * 2.0));
    }
    return cv::Rect((source.width - w) / 2, (source.height - h) / 2, w, h);
  };
  const RandomResizedCrop crop({64, 64}, {0.3, 0.9}, {0.5, 2.0});
  for (std::uint64_t i = 0; i < 500; ++i) {
    const cv::Size source(300 + static_cast<int>(i % 7) * 31, 200 + static_cast<int>(i % 5) * 17);
    ItemRng rng(3, 1, i);
    const cv::Rect expected = reference(source, rng);
    ASSERT_EQ(crop.crop_for(source, rng), expected) << "item " << i;
  }
}

TEST(RandomResizedCrop, CropOffsetsAreUniformOverEveryPosition) {
  // scale 0.25 and ratio 1 on 200x200: always a 100x100 crop, at top, left in [0, 100].
  const RandomResizedCrop crop({10, 10}, {0.25, 0.25}, {1.0, 1.0});
  std::set<int> lefts, tops;
  double sum = 0;
  constexpr int n = 5000;
  for (int i = 0; i < n; ++i) {
    ItemRng rng(5, 0, static_cast<std::uint64_t>(i));
    const cv::Rect r = crop.crop_for({200, 200}, rng);
    ASSERT_EQ(r.size(), cv::Size(100, 100));
    lefts.insert(r.x);
    tops.insert(r.y);
    sum += r.x;
  }
  EXPECT_EQ(lefts.size(), 101u);
  EXPECT_EQ(tops.size(), 101u);
  EXPECT_NEAR(sum / n, 50.0, 1.5);
}

TEST(RandomResizedCrop, ImpossibleRatioFallsBackToTheClampedCentralCrop) {
  // A 1000x10 image cannot hold 8% of its area with an aspect of at most 2: every attempt fails.
  const RandomResizedCrop crop({32, 32}, {0.08, 1.0}, {0.5, 2.0});
  for (std::uint64_t i = 0; i < 200; ++i) {
    ItemRng wide(1, 0, i);
    // in_ratio 100 > 2: h = 10, w = round(10 * 2) = 20, centred.
    ASSERT_EQ(crop.crop_for({1000, 10}, wide), cv::Rect(490, 0, 20, 10));
    ItemRng tall(1, 0, i);
    // in_ratio 0.01 < 0.5: w = 10, h = round(10 / 0.5) = 20, centred.
    ASSERT_EQ(crop.crop_for({10, 1000}, tall), cv::Rect(0, 490, 10, 20));
  }
}

TEST(RandomResizedCrop, WholeAreaWithFlexibleRatioAlwaysGivesTheWholeImage) {
  // scale 1: an attempt fits only with aspect ~1, which is the whole image; otherwise the fallback
  // (in_ratio 1 within the range) is the whole image too.
  const RandomResizedCrop crop({32, 32}, {1.0, 1.0}, {0.5, 2.0});
  for (std::uint64_t i = 0; i < 300; ++i) {
    ItemRng rng(2, 0, i);
    ASSERT_EQ(crop.crop_for({100, 100}, rng), cv::Rect(0, 0, 100, 100));
  }
}

TEST(RandomResizedCrop, SameItemGivesSameOutputAndOtherItemsOtherCrops) {
  const Augment augment({std::make_shared<RandomResizedCrop>(cv::Size(48, 40))}, 77);
  const cv::Mat source = random_image({320, 240}, 1);
  const auto run = [&](std::uint32_t epoch, std::uint64_t index) {
    Image image{.pixels = source, .index = index, .epoch = epoch, .name = {}};
    return augment(std::move(image)).pixels;
  };
  const cv::Mat first = run(2, 9);
  EXPECT_EQ(first.size(), cv::Size(48, 40));
  EXPECT_EQ(first.type(), CV_8UC3);
  EXPECT_TRUE(same_bytes(first, run(2, 9)));
  EXPECT_FALSE(same_bytes(first, run(2, 10)));
  EXPECT_FALSE(same_bytes(first, run(3, 9)));

  const RandomResizedCrop& crop = static_cast<const RandomResizedCrop&>(*augment.transforms()[0]);
  std::set<std::tuple<int, int, int, int>> crops;
  for (std::uint64_t i = 0; i < 50; ++i) {
    ItemRng rng = augment.rng_for(0, i);
    const cv::Rect r = crop.crop_for({320, 240}, rng);
    crops.emplace(r.x, r.y, r.width, r.height);
  }
  EXPECT_EQ(crops.size(), 50u);
}

TEST(RandomResizedCrop, PlanGivesTheRegionApplyUses) {
  const cv::Mat source = coordinate_image({700, 500});
  for (const Interpolation interpolation : {Interpolation::nearest, Interpolation::bilinear, Interpolation::area}) {
    const RandomResizedCrop crop({64, 48}, {0.08, 1.0}, {0.75, 4.0 / 3.0}, interpolation);
    for (std::uint64_t i = 0; i < 40; ++i) {
      ItemRng plan_rng(8, 0, i);
      const std::optional<Region> region = crop.plan(source.size(), plan_rng);
      ASSERT_TRUE(region.has_value());
      EXPECT_EQ(region->out, cv::Size(64, 48));

      Image image{.pixels = source, .name = {}};
      ItemRng apply_rng(8, 0, i);
      crop(image, apply_rng);
      // The same numbers were drawn: both streams are at the same point now.
      EXPECT_EQ(plan_rng(), apply_rng());
      // "decode the region, resize it to out" is what apply did.
      EXPECT_TRUE(same_bytes(image.pixels, resize_pixels(source(region->crop), region->out, interpolation)));
      if (interpolation == Interpolation::nearest) {
        EXPECT_EQ(decode_coordinates(image.pixels.at<cv::Vec3b>(0, 0)), region->crop.tl());
      }
    }
  }
}

TEST(RandomResizedCrop, DoesNotWriteIntoTheSourceBuffer) {
  const cv::Mat source = random_image({100, 80}, 4);
  const cv::Mat copy = source.clone();
  const RandomResizedCrop crop({100, 80}, {1.0, 1.0}, {1.25, 1.25});  // crop size == output size
  Image image{.pixels = source, .name = {}};
  ItemRng rng(0, 0, 0);
  crop(image, rng);
  EXPECT_NE(image.pixels.data, source.data);
  EXPECT_TRUE(image.pixels.isContinuous());
  EXPECT_TRUE(same_bytes(source, copy));
}

TEST(RandomResizedCrop, RejectsBadParametersNamingThem) {
  const auto message = [](auto make) {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message([] {
              RandomResizedCrop({224, 224}, {0.5, 0.2});
            }),
            "random_resized_crop: scale must satisfy 0 < min <= max <= 1, got 0.5:0.2");
  EXPECT_NE(message([] { RandomResizedCrop({224, 224}, {0.0, 1.0}); }).find("scale"), std::string::npos);
  EXPECT_NE(message([] { RandomResizedCrop({224, 224}, {0.5, 1.5}); }).find("scale"), std::string::npos);
  EXPECT_NE(message([] { RandomResizedCrop({224, 224}, {0.08, 1.0}, {0.0, 1.0}); }).find("ratio"), std::string::npos);
  EXPECT_NE(message([] { RandomResizedCrop({224, 224}, {0.08, 1.0}, {2.0, 1.0}); }).find("ratio"), std::string::npos);
  EXPECT_NE(message([] { RandomResizedCrop({0, 224}); }).find("random_resized_crop: size"), std::string::npos);
}

TEST(RandomResizedCrop, RefusesNormalizedImages) {
  const RandomResizedCrop crop({8, 8});
  Image image{.pixels = cv::Mat(3 * 16, 16, CV_32FC1, cv::Scalar(0)), .layout = PixelLayout::chw_f32, .name = {}};
  ItemRng rng(0, 0, 0);
  EXPECT_THROW(crop(image, rng), std::invalid_argument);
}

TEST(RandomResizedCrop, DescribeListsTheParameters) {
  const RandomResizedCrop crop({224, 192}, {0.25, 1.0}, {0.5, 2.0}, Interpolation::nearest);
  EXPECT_EQ(crop.describe(), "random_resized_crop size=224x192 scale=0.25:1 ratio=0.5:2 interpolation=nearest");
}

}  // namespace
}  // namespace stoke::nodes
