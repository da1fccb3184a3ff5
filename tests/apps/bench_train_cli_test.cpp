// `stoke bench train`, run as a program on a small generated shapes dataset with very short
// measurements: the JSON object holds both rates and their ratio, consistent with each other, the
// text ends with the ratio and the limiting stage, and each kind of bad input ends with a one-line
// error and a non-zero exit. No timing is asserted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using stoke::test::lines_of;
using stoke::test::run_stoke;
using test::TempDir;
using ::testing::HasSubstr;

// The first number under `key` in a one-line JSON object (the top level's, ahead of "runs").
double number(const std::string& json, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + key + "\":(-?[0-9.eE+-]+)"))) {
    ADD_FAILURE() << "no number '" << key << "' in " << json;
    return 0;
  }
  return std::stod(m[1].str());
}

class BenchTrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto made = run_stoke(dir_.path(), {"gen-shapes", "--out", data().string(), "--classes", "3", "--train", "32",
                                              "--val", "8", "--size", "32", "--seed", "2", "--quiet"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  fs::path data() const { return dir_.path() / "shapes"; }
  fs::path scratch() const { return dir_.path(); }
  // Short measurements on the generated data.
  std::vector<std::string> base(int repeats) const {
    return {"bench",     "train",
            "--data",    (data() / "train").string(),
            "--batch",   "8",
            "--device",  "cpu",
            "--seconds", "0.2",
            "--warmup",  "2",
            "--repeats", std::to_string(repeats)};
  }

  TempDir dir_;
};

TEST_F(BenchTrainCli, JsonHoldsBothRatesAndTheirRatio) {
  auto args = base(2);
  args.push_back("--json");
  const auto run = run_stoke(scratch(), args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 1u) << run.out;
  const std::string& j = lines[0];
  for (const char* key : {"\"model\":\"small_cnn\"", "\"batch\":8", "\"device\":\"cpu\"", "\"precision\":\"fp32\"",
                          "\"bottleneck\":\"", "\"repeats\":2", "\"runs\":["}) {
    EXPECT_THAT(j, HasSubstr(key));
  }
  const double compute = number(j, "compute_bound_images_per_sec");
  const double pipeline = number(j, "pipeline_images_per_sec");
  const double ratio = number(j, "ratio");
  const double busy = number(j, "compute_busy");
  EXPECT_GT(compute, 0);
  EXPECT_GT(pipeline, 0);
  EXPECT_NEAR(ratio, pipeline / compute, 1e-4 * std::max(1.0, ratio));
  EXPECT_GT(busy, 0);
  EXPECT_LE(busy, 1.0);
  // One entry per round, each with its own figures.
  const std::string runs = j.substr(j.find("\"runs\":["));
  int entries = 0;
  for (auto at = runs.find("\"pipeline_images_per_sec\""); at != std::string::npos;
       at = runs.find("\"pipeline_images_per_sec\"", at + 1)) {
    ++entries;
  }
  EXPECT_EQ(entries, 2) << j;
}

TEST_F(BenchTrainCli, TextEndsWithTheRatioAndTheLimitingStage) {
  const auto run = run_stoke(scratch(), base(1));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 3u) << run.out;
  EXPECT_THAT(lines[0], HasSubstr("compute bound"));
  EXPECT_THAT(lines[1], HasSubstr("pipeline"));
  EXPECT_THAT(lines[2], HasSubstr("ratio pipeline / compute bound: "));
  EXPECT_THAT(lines[2], HasSubstr("limited by "));
  EXPECT_THAT(run.err, HasSubstr("round 1 of 1"));  // progress goes to stderr
}

TEST_F(BenchTrainCli, BadInputEndsWithAOneLineError) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string says;
  };
  const std::string train = (data() / "train").string();
  const std::vector<Case> cases = {
      {{"bench", "train", "--data", (dir_.path() / "missing").string(), "--device", "cpu"}, 1, "missing"},
      {{"bench", "train", "--data", train, "--batch", "1000", "--device", "cpu"}, 1, "fewer than one batch"},
      {{"bench", "train", "--data", train, "--precision", "fp8", "--device", "cpu"}, 2, "--precision"},
      {{"bench", "train", "--data", train, "--precision", "bf16", "--device", "cpu"}, 2, "needs a CUDA device"},
      {{"bench", "train", "--data", train, "--seconds", "0", "--device", "cpu"}, 2, "--seconds"},
      {{"bench", "train", "--data", train, "--autotune", "maybe", "--device", "cpu"}, 2, "--autotune"},
      {{"bench", "train", "--data", train, "--repeats", "0", "--device", "cpu"}, 2, "--repeats"},
  };
  for (const Case& c : cases) {
    const auto run = run_stoke(scratch(), c.args);
    EXPECT_EQ(run.exit_code, c.exit_code) << c.says << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr(c.says));
    EXPECT_EQ(lines_of(run.err).size(), 1u) << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
  }
}

TEST(BenchTrainCliHelp, ExplainsTheOptionsAndTheSharedCores) {
  const TempDir dir;
  const auto run = run_stoke(dir.path(), {"bench", "train", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option :
       {"--data", "--model", "--batch", "--precision", "--device", "--seconds", "--repeats", "--json", "same cores"}) {
    EXPECT_THAT(run.out, HasSubstr(option));
  }
}

}  // namespace
}  // namespace stoke::nodes
