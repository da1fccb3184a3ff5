// `stoke train`, run as a program on a small generated shapes dataset: a short run prints one JSON
// object per epoch and writes checkpoints, --resume continues from one, and each kind of bad input
// ends with a one-line error naming the problem and a non-zero exit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using stoke::test::run_stoke;
using test::TempDir;
using ::testing::HasSubstr;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto made = run_stoke(dir_.path(), {"gen-shapes", "--out", data().string(), "--classes", "3", "--train",
                                              "32", "--val", "8", "--size", "32", "--seed", "2", "--quiet"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  fs::path data() const { return dir_.path() / "shapes"; }
  fs::path scratch() const { return dir_.path(); }
  // A short run on the generated data, in JSON, with checkpoints.
  std::vector<std::string> base(int epochs) const {
    return {"train", "--data", (data() / "train").string(), "--epochs", std::to_string(epochs), "--batch", "16",
            "--device", "cpu", "--json", "--checkpoint", (dir_.path() / "ck").string()};
  }

  TempDir dir_;
};

TEST_F(TrainCli, PrintsAnEpochPerLineAndWritesCheckpoints) {
  const auto run = run_stoke(scratch(), base(2));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 2u) << run.out;
  for (const char* key : {"\"epoch\"", "\"train_loss\"", "\"val_top1\"", "\"images_per_sec\"", "\"compute_busy\"",
                          "\"skipped\"", "\"checkpoint\""}) {
    EXPECT_THAT(lines[0], HasSubstr(key));
  }
  EXPECT_THAT(lines[0], HasSubstr("\"epoch\":1"));
  EXPECT_THAT(lines[1], HasSubstr("\"epoch\":2"));
  EXPECT_TRUE(fs::exists(dir_.path() / "ck" / "epoch_1.safetensors"));
  EXPECT_TRUE(fs::exists(dir_.path() / "ck" / "epoch_2.safetensors"));
  EXPECT_TRUE(fs::exists(dir_.path() / "ck" / "last.safetensors"));
}

TEST_F(TrainCli, ResumeContinuesAfterTheCheckpointsEpoch) {
  ASSERT_EQ(run_stoke(scratch(), base(1)).exit_code, 0);
  auto args = base(3);
  args.insert(args.end(), {"--resume", (dir_.path() / "ck" / "epoch_1.safetensors").string()});
  const auto run = run_stoke(scratch(), args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 2u) << run.out;
  EXPECT_THAT(lines[0], HasSubstr("\"epoch\":2"));
  EXPECT_THAT(lines[1], HasSubstr("\"epoch\":3"));
}

TEST_F(TrainCli, BadInputEndsWithAnErrorNamingIt) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string says;
  };
  fs::create_directories(dir_.path() / "one_class" / "only");
  test::write_bytes(dir_.path() / "one_class" / "only" / "a.jpg", test::small_jpeg(1, 32, 32));
  const std::string train = (data() / "train").string();
  const std::vector<Case> cases = {
      {{"train", "--data", (dir_.path() / "missing").string(), "--device", "cpu"}, 1, "missing"},
      {{"train", "--data", (dir_.path() / "one_class").string(), "--batch", "1", "--device", "cpu"}, 1,
       "at least two"},
      {{"train", "--data", train, "--batch", "1000", "--device", "cpu"}, 1, "fewer than one batch"},
      {{"train", "--data", train, "--precision", "bf16", "--device", "cpu"}, 2, "needs a CUDA device"},
      {{"train", "--data", train, "--precision", "fp8"}, 2, "--precision"},
      {{"train", "--data", train, "--schedule", "linear"}, 2, "linear"},
      {{"train", "--data", train, "--epochs", "-1"}, 2, "--epochs"},
      {{"train", "--data", train, "--transform", "sharpen", "--transform", "normalize", "--device", "cpu"}, 1,
       "sharpen"},
      {{"train", "--data", train, "--transform", "random_horizontal_flip"}, 2, "must be normalize"},
  };
  for (const Case& c : cases) {
    const auto run = run_stoke(scratch(), c.args);
    EXPECT_EQ(run.exit_code, c.exit_code) << c.says << ": " << run.err;
    EXPECT_THAT(run.err, HasSubstr(c.says));
    EXPECT_THAT(run.err, ::testing::Not(HasSubstr("terminate")));
  }
}

TEST_F(TrainCli, RefusesACheckpointOfAnotherModel) {
  ASSERT_EQ(run_stoke(scratch(), base(1)).exit_code, 0);
  const auto run = run_stoke(scratch(), {"train", "--data", (data() / "train").string(), "--model", "mobilenet",
                                         "--batch", "16", "--device", "cpu", "--resume",
                                         (dir_.path() / "ck" / "last.safetensors").string()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("last.safetensors"));
}

TEST(TrainCliHelp, ExplainsTheOptions) {
  const stoke::nodes::test::TempDir dir;
  const auto run = run_stoke(dir.path(), {"train", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option : {"--data", "--val", "--model", "--epochs", "--precision", "--resume", "--checkpoint"}) {
    EXPECT_THAT(run.out, HasSubstr(option));
  }
}

}  // namespace
}  // namespace stoke::nodes
