// `stoke bench autotune`, run as a program for a fraction of a second per setting: the JSON line
// has the fields with sane values, the generated corpus is deleted at the end, and bad options
// are usage errors naming the option. No timing is asserted: the figures depend on the machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // setenv

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

using Result = stoke::test::CliResult;
using stoke::test::run_stoke;

// 2 classes x 8 small JPEGs.
void make_corpus(const fs::path& root) {
  for (const char* cls : {"a", "b"}) {
    for (int i = 0; i < 8; ++i) {
      test::write_bytes(root / cls / (std::to_string(i) + ".jpg"), test::small_jpeg(i + (cls[0] - 'a') * 10, 48, 40));
    }
  }
}

// The number after "key": in a one-line JSON object; NaN for null or a missing key.
double number(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  const char* text = json.c_str() + at + key.size() + 3;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  return end == text ? std::nan("") : value;
}

// Short, and at most 2 decode calls at once so that the sweep's length does not grow with the cores.
const std::vector<std::string> short_run = {
    "--seconds", "1.5", "--sweep-seconds", "0.4", "--sweep-depths", "1", "--max-concurrency", "2",
    "--batch",   "8",   "--size",          "32",  "--repeats",      "1"};

std::vector<std::string> args(std::vector<std::string> head, const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

TEST(BenchAutotuneCommand, ShortJsonRunHasTheFieldsWithSaneValues) {
  TempDir scratch;
  make_corpus(scratch / "data");
  const Result r = run_stoke(scratch.path(),
                             args({"bench", "autotune", "--data", (scratch / "data").string(), "--json"}, short_run));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;  // one JSON line
  EXPECT_THAT(r.out, HasSubstr("\"bench\":\"autotune\""));
  EXPECT_THAT(r.out, HasSubstr("\"runs\":[{\"ratio_to_best_static\":")) << "each run with the scheduler";
  EXPECT_GT(number(r.out, "ratio_to_best_static"), 0) << r.out;
  EXPECT_GT(number(r.out, "autotune_images_per_sec"), 0) << r.out;
  EXPECT_GT(number(r.out, "best_static_images_per_sec"), 0) << r.out;
  const double busy = number(r.out, "compute_busy");
  EXPECT_GE(busy, 0) << r.out;
  EXPECT_LE(busy, 1) << r.out;
  // Null when 95% of the best static rate was never reached, else within the run.
  EXPECT_THAT(r.out, HasSubstr("\"seconds_to_95pct\":"));
  const double to_95 = number(r.out, "seconds_to_95pct");
  if (!std::isnan(to_95)) {
    EXPECT_GE(to_95, 0.9);
    EXPECT_LE(to_95, 2.5);
  }
  EXPECT_GE(number(r.out, "decisions"), 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"best_static\":{\"decode\":"));
  EXPECT_GE(number(r.out, "decode"), 1);
  EXPECT_LE(number(r.out, "decode"), 2);
  EXPECT_EQ(number(r.out, "batch"), 8);
  EXPECT_EQ(number(r.out, "size"), 32);
  EXPECT_EQ(number(r.out, "images"), 16);
  EXPECT_THAT(r.out, HasSubstr("\"final\":{"));
  EXPECT_GE(number(r.out, "compute"), 2);  // fixed: the scheduler may not move it
  EXPECT_GE(number(r.out, "in_flight"), 1);
  EXPECT_THAT(r.out, HasSubstr("\"targets_met\":"));
}

TEST(BenchAutotuneCommand, WithoutDataGeneratesACorpusAndDeletesIt) {
  TempDir scratch;
  const fs::path tmp = scratch / "tmp";
  fs::create_directories(tmp);
  ASSERT_EQ(::setenv("TMPDIR", tmp.c_str(), 1), 0);  // the child's temp_directory_path()
  const Result r =
      run_stoke(scratch.path(),
                args({"bench", "autotune", "--corpus-images", "20", "--corpus-side", "48", "--max-concurrency", "1"},
                     {"--seconds", "1", "--sweep-seconds", "0.3", "--sweep-depths", "1", "--batch", "4", "--size", "32",
                      "--repeats", "1"}));
  ::unsetenv("TMPDIR");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("generated 20 JPEGs"));
  EXPECT_THAT(r.err, HasSubstr(tmp.string()));
  EXPECT_TRUE(fs::is_empty(tmp)) << "the generated corpus was left in " << tmp;
  EXPECT_THAT(r.out, HasSubstr("best static"));
  EXPECT_THAT(r.out, HasSubstr("scheduler:"));
  EXPECT_THAT(r.out, HasSubstr("targets"));
}

TEST(BenchAutotuneCommand, BadOptionsAreUsageErrorsNamingTheOption) {
  TempDir scratch;
  for (const char* bad : {"-1", "0", "abc", "nan"}) {
    const Result r = run_stoke(scratch.path(), {"bench", "autotune", "--compute-ms", bad});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("compute-ms")) << bad;
  }
  const Result depths = run_stoke(scratch.path(), {"bench", "autotune", "--sweep-depths", "1,x"});
  EXPECT_EQ(depths.exit_code, 2);
  EXPECT_THAT(depths.err, HasSubstr("--sweep-depths"));
  const Result repeats = run_stoke(scratch.path(), {"bench", "autotune", "--repeats", "0"});
  EXPECT_EQ(repeats.exit_code, 2);
  EXPECT_THAT(repeats.err, HasSubstr("--repeats"));
  const Result unknown = run_stoke(scratch.path(), {"bench", "autotune", "--frobnicate"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("frobnicate"));
  const Result help = run_stoke(scratch.path(), {"bench", "autotune", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--compute-ms"));
  EXPECT_THAT(help.out, HasSubstr("97%"));
}

}  // namespace
}  // namespace stoke::nodes
