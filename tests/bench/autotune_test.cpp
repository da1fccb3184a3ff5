// The autotune harness's measures on synthetic samples (per-second rates, the time to reach a
// rate), its description of a setting, its refusal of bad options, and the generated corpus that
// is deleted with its owner.
#include "stoke/bench/autotune.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "stoke/nodes/image_folder.hpp"

namespace stoke::bench {
namespace {

// Samples every 100 ms for `seconds`: nothing before `start_s`, then 100 images per 100 ms.
std::vector<RateSample> ramp(double start_s, double seconds) {
  std::vector<RateSample> samples;
  for (int k = 0; k <= static_cast<int>(seconds * 10); ++k) {
    const double t = k / 10.0;
    samples.push_back({t, t < start_s ? 0 : static_cast<std::uint64_t>(std::lround((t - start_s) * 1000))});
  }
  return samples;
}

TEST(AutotuneBench, RatesPerWholeSecond) {
  const std::vector<RateSample> samples = ramp(0, 3);
  EXPECT_EQ(rates_per_second(samples, 0), (std::vector<double>{1000, 1000, 1000}));
  EXPECT_EQ(rates_per_second(samples, 1).size(), 2u);
  EXPECT_EQ(rates_per_second(ramp(1, 3), 0).front(), 0.0);
}

TEST(AutotuneBench, SecondsToReachARateLooksBackOneSecond) {
  const std::vector<RateSample> samples = ramp(1, 4);
  EXPECT_NEAR(seconds_to_reach(samples, 900), 1.9, 1e-9);  // 900 images between 0.9 and 1.9 s
  EXPECT_NEAR(seconds_to_reach(samples, 1000), 2.0, 1e-9);
  EXPECT_TRUE(std::isnan(seconds_to_reach(samples, 1001)));
}

TEST(AutotuneBench, DescribesASetting) {
  EXPECT_EQ(describe({.read = 2, .decode = 3, .depth = 4}), "decode 3, read 2, in-flight 4 batches");
  EXPECT_EQ(describe({}), "decode 1, read 1, in-flight 1 batch");
}

TEST(AutotuneBench, GeneratedCorpusIsAnImageFolderDeletedWithItsOwner) {
  std::filesystem::path root;
  {
    const GeneratedCorpus corpus(10, 32);
    root = corpus.root();
    const auto folder = std::make_shared<nodes::ImageFolder>(corpus.train());
    EXPECT_EQ(folder->size(), 10u);
    EXPECT_EQ(folder->classes().size(), 10u);
    EXPECT_THROW(measure_autotune(folder, {.sweep_depths = {}}), std::invalid_argument);
    EXPECT_THROW(measure_autotune(folder, {.compute_ms = 0}), std::invalid_argument);
  }
  EXPECT_FALSE(std::filesystem::exists(root));
}

}  // namespace
}  // namespace stoke::bench
