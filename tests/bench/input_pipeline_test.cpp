// measure_input_pipeline: the images it counts, the files it read and the skipped files it names
// on a folder with bad files among good ones; the baseline loop's rate and the efficiency derived
// from it; a time limit stops an endless run.
#include "stoke/bench/input_pipeline.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "dataset_test_support.hpp"
#include "stoke/nodes/image_folder.hpp"

namespace stoke::bench {
namespace {

using nodes::test::TempDir;
using ::testing::HasSubstr;

// 2 classes x 5 good 48x40 JPEGs, plus 2 files that do not decode.
nodes::DatasetPtr make_folder(const TempDir& dir) {
  for (const char* cls : {"a", "b"}) {
    for (int i = 0; i < 5; ++i) {
      nodes::test::write_bytes(dir / "data" / cls / ("good_" + std::to_string(i) + ".jpg"),
                               nodes::test::small_jpeg(i + (cls[0] - 'a') * 10, 48, 40));
    }
  }
  nodes::test::write_text(dir / "data/a/bad_text.jpg", "not an image");
  nodes::test::write_bytes(dir / "data/b/bad_empty.jpg", {});
  return std::make_shared<nodes::ImageFolder>(dir / "data");
}

train::InputConfig small_config() {
  train::InputConfig config;
  config.batch_size = 4;
  config.size = 32;
  config.threads = 2;
  config.autotune = false;
  return config;
}

TEST(InputPipelineBench, CountsImagesAndNamesEverySkippedFile) {
  TempDir dir;
  const nodes::DatasetPtr dataset = make_folder(dir);
  std::uint64_t last_progress = 0;
  const InputPipelineResult r = measure_input_pipeline(
      dataset, small_config(),
      {.baseline_images = 12, .progress = [&](std::uint64_t images, double) { last_progress = images; }});
  EXPECT_EQ(r.images, 10u);
  EXPECT_EQ(r.batches, 3u);  // 4 + 4 + 2
  EXPECT_EQ(r.files_read, 12u);
  EXPECT_EQ(r.skipped_count, 2u);
  ASSERT_EQ(r.skipped.size(), 2u);
  for (const auto& skip : r.skipped) EXPECT_THAT(skip.file, HasSubstr("bad_")) << skip.reason;
  EXPECT_LE(last_progress, r.images);
  EXPECT_EQ(r.threads, 2);
  EXPECT_GT(r.baseline_images_per_sec, 0.0);
  EXPECT_DOUBLE_EQ(r.efficiency(), r.images_per_sec() / (2 * r.baseline_images_per_sec));
  for (const auto& stage : r.report.stages) {
    EXPECT_GE(r.busy_pct(stage), 0.0) << stage.name;
  }
}

TEST(InputPipelineBench, ATimeLimitStopsAnEndlessRun) {
  TempDir dir;
  const InputPipelineResult r = measure_input_pipeline(make_folder(dir), small_config(), {.seconds = 0.3});
  EXPECT_TRUE(r.report.stopped);
  EXPECT_EQ(r.files_read, r.images + r.skipped_count);
  EXPECT_EQ(r.baseline_images_per_sec, 0.0);
  EXPECT_EQ(r.efficiency(), 0.0);
}

}  // namespace
}  // namespace stoke::bench
