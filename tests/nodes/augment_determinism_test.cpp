// A whole augmentation chain (crop, flip, jitter, normalize) gives the same bytes per item whatever
// the number of threads running it, and the registry builds the same chain from specs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <opencv2/core.hpp>
#include <optional>
#include <stoke/graph/pipeline.hpp>
#include <stoke/nodes/color_jitter.hpp>
#include <stoke/nodes/normalize.hpp>
#include <stoke/nodes/random_horizontal_flip.hpp>
#include <stoke/nodes/random_resized_crop.hpp>
#include <stoke/nodes/registry.hpp>
#include <stoke/nodes/transform.hpp>
#include <vector>

namespace stoke::nodes {
namespace {

constexpr std::uint64_t kItems = 200;

/// Item i: random pixels of a size that varies with i, a function of i only.
Image make_image(std::uint64_t index) {
  const int width = 48 + static_cast<int>(index % 13) * 5;
  const int height = 40 + static_cast<int>(index % 7) * 6;
  cv::Mat pixels(height, width, CV_8UC3);
  cv::RNG rng(index + 1);
  rng.fill(pixels, cv::RNG::UNIFORM, 0, 256);
  return Image{.pixels = pixels, .label = static_cast<int>(index % 10), .index = index, .epoch = 1, .name = {}};
}

std::vector<std::uint8_t> bytes_of(const Image& image) {
  const cv::Mat m = image.pixels.isContinuous() ? image.pixels : image.pixels.clone();
  std::vector<std::uint8_t> out(m.total() * m.elemSize());
  std::memcpy(out.data(), m.data, out.size());
  return out;
}

std::vector<TransformPtr> chain() {
  return {std::make_shared<RandomResizedCrop>(cv::Size(32, 28)), std::make_shared<RandomHorizontalFlip>(0.5),
          std::make_shared<ColorJitter>(0.4, 0.4, 0.4, 0.1), std::make_shared<Normalize>()};
}

/// Runs `augment` over the items in a pipeline whose augment stage has 4 parallel, unordered
/// calls, on `threads` threads; outputs by item index.
std::vector<std::vector<std::uint8_t>> run_pipeline(const Augment& augment, int threads) {
  std::vector<std::vector<std::uint8_t>> outputs(kItems);
  std::uint64_t delivered = 0;
  graph::Pipeline pipe({.max_in_flight = 32, .threads = threads});
  pipe.source("images",
              [next = std::uint64_t{0}]() mutable -> std::optional<Image> {
                if (next == kItems) return std::nullopt;
                return make_image(next++);
              })
      .map("augment", augment, {.concurrency = graph::parallel(4), .ordered = false})
      .sink("collect", [&](Image image) {
        EXPECT_EQ(image.layout, PixelLayout::chw_f32);
        EXPECT_TRUE(outputs.at(image.index).empty()) << "item " << image.index << " delivered twice";
        outputs.at(image.index) = bytes_of(image);
        ++delivered;
      });
  pipe.run();
  EXPECT_EQ(delivered, kItems);
  return outputs;
}

TEST(AugmentDeterminism, OneThreadAndFourThreadsGiveTheSameBytesPerItem) {
  const Augment augment(chain(), 2024);
  const auto serial = run_pipeline(augment, 1);
  const auto parallel = run_pipeline(augment, 4);
  for (std::uint64_t i = 0; i < kItems; ++i) {
    ASSERT_EQ(serial[i].size(), 3u * 32 * 28 * sizeof(float)) << "item " << i;
    ASSERT_EQ(serial[i], parallel[i]) << "item " << i;
    // And the same as calling the Augment directly, outside any graph.
    ASSERT_EQ(serial[i], bytes_of(augment(make_image(i)))) << "item " << i;
  }
  // Different items really were augmented differently.
  EXPECT_NE(serial[0], serial[1]);
}

TEST(AugmentDeterminism, AnotherSeedGivesOtherOutputs) {
  const Augment a(chain(), 1), b(chain(), 2);
  int differing = 0;
  for (std::uint64_t i = 0; i < 20; ++i) differing += bytes_of(a(make_image(i))) != bytes_of(b(make_image(i))) ? 1 : 0;
  EXPECT_EQ(differing, 20);
}

TEST(BuiltinTransforms, RegistrySpecsBuildTheSameChain) {
  Registry registry;
  register_builtin_transforms(registry);
  const std::vector<TransformPtr> from_specs = registry.make_list(
      "random_resized_crop size=32x28; random_horizontal_flip; color_jitter brightness=0.4 contrast=0.4 "
      "saturation=0.4 hue=0.1; normalize");
  ASSERT_EQ(from_specs.size(), 4u);
  const Augment built(chain(), 7), specified(from_specs, 7);
  for (std::size_t t = 0; t < 4; ++t) {
    EXPECT_EQ(built.transforms()[t]->describe(), specified.transforms()[t]->describe());
  }
  for (std::uint64_t i = 0; i < 20; ++i) {
    ASSERT_EQ(bytes_of(built(make_image(i))), bytes_of(specified(make_image(i)))) << "item " << i;
  }
}

TEST(BuiltinTransforms, EveryBuiltinIsRegisteredWithDocsAndChecksItsParameters) {
  Registry registry;
  register_builtin_transforms(registry);
  for (const char* name :
       {"random_resized_crop", "resize", "center_crop", "random_horizontal_flip", "color_jitter", "normalize"}) {
    const TransformEntry* entry = registry.find(name);
    ASSERT_NE(entry, nullptr) << name;
    EXPECT_FALSE(entry->doc.empty()) << name;
    EXPECT_EQ(
        registry.make(std::string(name) + (entry->params.empty() || !entry->params[0].required ? "" : " size=64"))
            ->name(),
        name);
  }
  EXPECT_EQ(registry.make("resize size=256")->describe(), "resize size=256 interpolation=bilinear");
  EXPECT_EQ(registry.make("resize size=64x48 interpolation=nearest")->describe(),
            "resize size=64x48 interpolation=nearest");
  EXPECT_EQ(registry.make("normalize mean=0.5,0.5,0.5 std=0.25,0.25,0.25")->describe(),
            "normalize mean=0.5,0.5,0.5 std=0.25,0.25,0.25");
  // Two means suit a two-channel image: the registry takes them, an RGB image refuses them.
  const auto two = registry.make("normalize mean=0.5,0.5 std=0.25");
  Image rgb{.pixels = cv::Mat(2, 2, CV_8UC3, cv::Scalar(1, 2, 3)), .name = "rgb.png"};
  ItemRng rng(0, 0, 0);
  EXPECT_THROW((*two)(rgb, rng), std::invalid_argument);
  EXPECT_THROW(registry.make("normalize mean=0.5 std=0"), std::invalid_argument);
  EXPECT_THROW(registry.make("random_resized_crop size=32 scale=0.5:2"), std::invalid_argument);
  EXPECT_THROW(registry.make("resize size=32 interpolation=cubic"), std::invalid_argument);
}

}  // namespace
}  // namespace stoke::nodes
