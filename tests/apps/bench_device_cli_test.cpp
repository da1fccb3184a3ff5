// `stoke bench device`, run as a program on the CPU device: the pipelined run moves exactly the
// batches asked for, its compute stage was busy a real share of the time, the serial baseline ran,
// and the options are documented and checked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stoke/gpu/device.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli_test_support.hpp"
#include "dataset_test_support.hpp"

namespace stoke::app {
namespace {

using stoke::nodes::test::TempDir;
using stoke::test::CliResult;
using stoke::test::run_stoke;
using ::testing::HasSubstr;

// The number after "key": in a one-line JSON object; fails the test when the key is absent.
double number(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const auto at = json.find(needle);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << key << " in " << json;
    return std::nan("");
  }
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

TEST(BenchDeviceCommand, CpuRunMovesEveryBatchAndReportsBusyTimeAndBaseline) {
  TempDir scratch;
  const CliResult r = run_stoke(scratch.path(), {"bench", "device", "--device", "cpu", "--batch", "4", "--size", "16",
                                                 "--batches", "12", "--compute-us", "200", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << "one JSON line: " << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"device\":\"cpu\""));
  EXPECT_THAT(r.out, HasSubstr("\"batches\":12,"));
  EXPECT_THAT(r.out, HasSubstr("\"images\":48,"));
  // 12 x 200 us of spinning inside the compute stage's callable, over the whole run.
  const double busy = number(r.out, "compute_busy_pct");
  EXPECT_GT(busy, 0.0);
  EXPECT_LE(busy, 100.0);
  EXPECT_GE(number(r.out, "compute_time_ms"), 12 * 0.2);
  EXPECT_GT(number(r.out, "images_per_sec"), 0.0);
  EXPECT_EQ(number(r.out, "serial_batches"), 12.0);
  EXPECT_GT(number(r.out, "serial_images_per_sec"), 0.0);
  EXPECT_GT(number(r.out, "overlap_speedup"), 0.0);
  // No copies on the CPU device: the bandwidth part says why it was skipped, NVML is n/a.
  EXPECT_THAT(r.out, HasSubstr("\"measured\":false"));
  EXPECT_THAT(r.out, HasSubstr("\"gpu_util_note\":\""));
}

// On a machine with a GPU (skipped elsewhere): both kinds of copy are timed, and the pipeline runs
// on cuda:0 with its compute timed by events on the compute stream.
TEST(BenchDeviceCommand, CudaRunMeasuresBandwidthAndOverlap) {
  if (gpu::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << gpu::cuda_unavailable_reason();
  TempDir scratch;
  const CliResult r =
      run_stoke(scratch.path(), {"bench", "device", "--device", "cuda", "--batch", "16", "--size", "64", "--batches",
                                 "40", "--compute-us", "500", "--copy-reps", "5", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"device\":\"cuda:0\""));
  EXPECT_THAT(r.out, HasSubstr("\"measured\":true"));
  EXPECT_GT(number(r.out, "pinned_gbps"), 0.0);
  EXPECT_GT(number(r.out, "pageable_gbps"), 0.0);
  EXPECT_THAT(r.out, HasSubstr("\"batches\":40,"));
  EXPECT_THAT(r.out, HasSubstr("\"images\":640,"));
  // 40 kernels of 500 us each, timed with events on the compute stream.
  EXPECT_GE(number(r.out, "compute_time_ms"), 40 * 0.5 * 0.95);
  const double busy = number(r.out, "compute_busy_pct");
  EXPECT_GT(busy, 0.0);
  EXPECT_LE(busy, 100.0);
  EXPECT_GT(number(r.out, "copy_time_ms"), 0.0);
  EXPECT_GT(number(r.out, "serial_images_per_sec"), 0.0);
}

TEST(BenchDeviceCommand, TextOutputNamesEveryFigure) {
  TempDir scratch;
  const CliResult r = run_stoke(scratch.path(), {"bench", "device", "--device", "cpu", "--batch", "2", "--size", "8",
                                                 "--batches", "5", "--compute-us", "100", "--convert", "bf16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* figure : {"host-to-device bandwidth: skipped", "pipelined: 5 batches, 10 images", "compute busy",
                             "compute starved", "slot waits", "GPU utilization  n/a", "serial", "overlap speedup"})
    EXPECT_THAT(r.out, HasSubstr(figure));
}

TEST(BenchDeviceCommand, HelpMentionsEveryOption) {
  TempDir scratch;
  const CliResult r = run_stoke(scratch.path(), {"bench", "device", "--help"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* option : {"--device", "--batch", "--size", "--batches", "--seconds", "--compute-us", "--streams",
                             "--depth", "--slots", "--convert", "--copy-reps", "--json", "--help"})
    EXPECT_THAT(r.out, HasSubstr(option));
  const CliResult listed = run_stoke(scratch.path(), {"bench", "--help"});
  EXPECT_THAT(listed.out, HasSubstr("device"));
}

TEST(BenchDeviceCommand, MissingCudaDeviceIsNamed) {
  TempDir scratch;
  const CliResult r = run_stoke(scratch.path(), {"bench", "device", "--device", "cuda:7", "--batches", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr("cuda:7"));
}

TEST(BenchDeviceCommand, BadValuesAreUsageErrorsNamingTheOption) {
  TempDir scratch;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--batch", "0"}, "--batch"},     {{"--size", "-3"}, "--size"},
      {{"--batches", "0"}, "--batches"}, {{"--seconds", "1", "--batches", "3"}, "--seconds"},
      {{"--streams", "0"}, "--streams"}, {{"--convert", "f16"}, "--convert"},
  };
  for (const auto& [extra, option] : cases) {
    std::vector<std::string> args = {"bench", "device", "--device", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run_stoke(scratch.path(), args);
    EXPECT_EQ(r.exit_code, 2) << option << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(option));
  }
}

}  // namespace
}  // namespace stoke::app
