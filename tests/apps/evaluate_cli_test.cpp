// `stoke evaluate`, run as a program with a checkpoint trained once for the suite on a small
// generated shapes dataset: top-1, top-5 and the confusion matrix agree with each other and with
// the image count, unreadable files are counted as skipped, many classes print the most confused
// pairs, and each kind of bad input ends with a one-line error naming the problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "dataset_test_support.hpp"
#include "left_out_shard.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using stoke::test::lines_of;
using stoke::test::plain_safetensors;
using stoke::test::run_stoke;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// The number after "key": in a one-line JSON object.
double number_at(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\":");
  EXPECT_NE(at, std::string::npos) << key << " in " << json;
  if (at == std::string::npos) return -1;
  return std::strtod(json.c_str() + at + key.size() + 3, nullptr);
}

// The array of arrays of numbers after "key":.
std::vector<std::vector<std::uint64_t>> matrix_at(const std::string& json, const std::string& key) {
  std::vector<std::vector<std::uint64_t>> rows;
  auto at = json.find("\"" + key + "\":[");
  EXPECT_NE(at, std::string::npos) << key << " in " << json;
  if (at == std::string::npos) return rows;
  at += key.size() + 4;
  while (json[at] == '[') {
    std::vector<std::uint64_t> row;
    ++at;
    while (json[at] != ']') {
      char* end = nullptr;
      row.push_back(std::strtoull(json.c_str() + at, &end, 10));
      at = static_cast<std::size_t>(end - json.c_str());
      if (json[at] == ',') ++at;
    }
    rows.push_back(row);
    ++at;  // ']'
    if (json[at] == ',') ++at;
  }
  return rows;
}

// Makes a shapes dataset of `classes` classes in dir/shapes and trains one epoch on it into
// dir/ck; returns the checkpoint.
std::string train_checkpoint(const fs::path& dir, int classes, int train_per_class) {
  const auto made =
      run_stoke(dir, {"gen-shapes", "--out", (dir / "shapes").string(), "--classes", std::to_string(classes), "--train",
                      std::to_string(train_per_class), "--val", "8", "--size", "32", "--seed", "2", "--quiet"});
  EXPECT_EQ(made.exit_code, 0) << made.err;
  const auto trained =
      run_stoke(dir, {"train", "--data", (dir / "shapes" / "train").string(), "--epochs", "1", "--batch", "16",
                      "--device", "cpu", "--json", "--checkpoint", (dir / "ck").string()});
  EXPECT_EQ(trained.exit_code, 0) << trained.err;
  return (dir / "ck" / "last.safetensors").string();
}

class EvaluateCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    checkpoint_ = train_checkpoint(dir_->path(), 3, 32);
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static std::string val() { return (dir_->path() / "shapes" / "val").string(); }
  static const std::string& checkpoint() { return checkpoint_; }
  fs::path scratch() const { return scratch_.path(); }

  static std::unique_ptr<TempDir> dir_;
  static std::string checkpoint_;
  TempDir scratch_;
};

std::unique_ptr<TempDir> EvaluateCli::dir_;
std::string EvaluateCli::checkpoint_;

TEST_F(EvaluateCli, JsonAccuracyAgreesWithTheConfusionMatrix) {
  const auto run = run_stoke(scratch(), {"evaluate", "--checkpoint", checkpoint(), "--data", val(), "--batch", "5",
                                         "--device", "cpu", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 1u) << run.out;
  const std::string& json = lines[0];
  for (const char* key : {"\"top1\":", "\"top5\":", "\"images\":", "\"skipped\":", "\"confusion\":", "\"classes\":"}) {
    EXPECT_THAT(json, HasSubstr(key));
  }
  EXPECT_THAT(json, HasSubstr(R"("classes":["00_circle","01_square","02_triangle"])"));
  const double images = number_at(json, "images");
  EXPECT_EQ(images, 24);  // 3 classes x 8, every one once (--batch 5: the last batch is partial)
  EXPECT_EQ(number_at(json, "skipped"), 0);

  const auto confusion = matrix_at(json, "confusion");
  ASSERT_EQ(confusion.size(), 3u) << json;
  std::uint64_t total = 0, diagonal = 0;
  for (std::size_t i = 0; i < confusion.size(); ++i) {
    ASSERT_EQ(confusion[i].size(), 3u) << json;
    std::uint64_t row = 0;
    for (const std::uint64_t n : confusion[i]) row += n;
    EXPECT_EQ(row, 8u) << "row " << i << " holds the images of class " << i;
    total += row;
    diagonal += confusion[i][i];
  }
  EXPECT_EQ(static_cast<double>(total), images);
  EXPECT_NEAR(number_at(json, "top1"), static_cast<double>(diagonal) / images, 1e-5);
  EXPECT_EQ(number_at(json, "top5"), 1.0);  // 3 classes: the label is always among the top 5
}

TEST_F(EvaluateCli, TextShowsAccuracyAndTheMatrixWithClassNames) {
  const auto run = run_stoke(
      scratch(), {"evaluate", "--checkpoint", checkpoint(), "--data", val(), "--device", "cpu", "--threads", "2"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 6u) << run.out;  // summary, title, header, 3 rows
  EXPECT_THAT(lines[0], HasSubstr("top-1 "));
  EXPECT_THAT(lines[0], HasSubstr("top-5 1.0000"));
  EXPECT_THAT(lines[0], HasSubstr("24 images, 0 skipped"));
  EXPECT_THAT(lines[1], HasSubstr("rows: true class, columns: predicted"));
  EXPECT_THAT(lines[2], ::testing::MatchesRegex(" *00_circle +01_square +02_triangle"));
  EXPECT_THAT(lines[3], ::testing::StartsWith("00_circle "));
  EXPECT_THAT(lines[5], ::testing::StartsWith("02_triangle "));
}

TEST_F(EvaluateCli, UnreadableFilesAreSkippedAndNamed) {
  const fs::path data = scratch() / "val";
  fs::copy(val(), data, fs::copy_options::recursive);
  const fs::path broken = data / "01_square" / "broken.jpg";
  test::write_bytes(broken, test::distinct_bytes(5, 500));
  const auto run = run_stoke(
      scratch(), {"evaluate", "--checkpoint", checkpoint(), "--data", data.string(), "--device", "cpu", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(number_at(run.out, "images"), 24);
  EXPECT_EQ(number_at(run.out, "skipped"), 1);
  EXPECT_THAT(run.out, HasSubstr(broken.string()));
}

TEST_F(EvaluateCli, BadInputEndsWithAnErrorNamingIt) {
  const std::string truncated = (scratch() / "truncated.safetensors").string();
  {
    const std::string whole = stoke::test::slurp(checkpoint());
    test::write_text(truncated, std::string_view(whole).substr(0, whole.size() - 100));
  }
  const std::string noise = (scratch() / "noise.safetensors").string();
  test::write_bytes(noise, test::distinct_bytes(3, 4096));
  const std::string plain = (scratch() / "plain.safetensors").string();
  test::write_bytes(plain, plain_safetensors());
  const std::string missing = (scratch() / "missing.safetensors").string();
  const std::string no_data = (scratch() / "no_data").string();
  const std::string empty = (scratch() / "empty").string();
  fs::create_directories(empty);
  // Other classes: one renamed, and one missing.
  const fs::path renamed = scratch() / "renamed";
  fs::copy(val(), renamed, fs::copy_options::recursive);
  fs::rename(renamed / "01_square", renamed / "01_box");
  const fs::path fewer = scratch() / "fewer";
  fs::copy(val(), fewer, fs::copy_options::recursive);
  fs::remove_all(fewer / "02_triangle");

  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {{"--checkpoint", missing, "--data", val()}, 1, {missing}},
      {{"--checkpoint", truncated, "--data", val()}, 1, {truncated}},
      {{"--checkpoint", noise, "--data", val()}, 1, {noise}},
      {{"--checkpoint", plain, "--data", val()}, 1, {plain, "stoke train"}},
      {{"--checkpoint", checkpoint(), "--data", no_data}, 1, {no_data}},
      {{"--checkpoint", checkpoint(), "--data", empty}, 1, {empty}},
      {{"--checkpoint", checkpoint(), "--data", renamed.string()}, 1, {renamed.string(), "'01_box'", "'01_square'"}},
      {{"--checkpoint", checkpoint(), "--data", fewer.string()}, 1, {fewer.string(), "'02_triangle'"}},
      {{"--data", val()}, 2, {"--checkpoint"}},
      {{"--checkpoint", checkpoint()}, 2, {"--data"}},
      {{"--checkpoint", checkpoint(), "--data", val(), "--batch", "0"}, 2, {"--batch"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{"evaluate", "--device", "cpu"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const auto run = run_stoke(scratch(), args);
    EXPECT_EQ(run.exit_code, c.exit_code) << c.says[0] << ": " << run.err;
    for (const std::string& says : c.says) EXPECT_THAT(run.err, HasSubstr(says));
    EXPECT_THAT(run.err, Not(HasSubstr("terminate")));
    EXPECT_EQ(run.out, "");
    EXPECT_LE(lines_of(run.err).size(), 2u) << run.err;  // the device line (--device cpu) and the error
  }
}

TEST(EvaluateCliManyClasses, PrintsTheMostConfusedPairsInsteadOfTheMatrix) {
  const TempDir dir;
  const std::string checkpoint = train_checkpoint(dir.path(), 21, 2);
  const auto run = run_stoke(dir.path(), {"evaluate", "--checkpoint", checkpoint, "--data",
                                          (dir.path() / "shapes" / "val").string(), "--device", "cpu"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("168 images"));  // 21 x 8
  EXPECT_THAT(run.out, Not(HasSubstr("confusion matrix")));
  // One epoch on 42 images: far from perfect, so there are confused pairs to list.
  EXPECT_THAT(run.out, HasSubstr("most confused classes"));
  EXPECT_THAT(run.out, ::testing::ContainsRegex("\n  [0-9a-z_]+ -> [0-9a-z_]+: [0-9]+ \\([0-9.]+%\\)"));

  const auto json = run_stoke(dir.path(), {"evaluate", "--checkpoint", checkpoint, "--data",
                                           (dir.path() / "shapes" / "val").string(), "--device", "cpu", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(matrix_at(json.out, "confusion").size(), 21u);  // JSON: the full matrix always
}

// What the dataset leaves out when it opens is counted and named apart from the skipped files.
TEST(EvaluateCliLeftOut, WhatTheDatasetLeavesOutIsCountedAndNamedApartFromTheSkips) {
  const TempDir dir;
  const stoke::test::LeftOutShard shard = stoke::test::shard_with_left_out_members(dir.path());
  const auto trained =
      run_stoke(dir.path(), {"train", "--data", shard.shard.string(), "--epochs", "1", "--batch", "8", "--device",
                             "cpu", "--json", "--checkpoint", (dir.path() / "ck").string()});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::vector<std::string> args = {
      "evaluate", "--checkpoint", (dir.path() / "ck" / "last.safetensors").string(), "--data", shard.shard.string(),
      "--device", "cpu"};
  auto json_args = args;
  json_args.push_back("--json");
  const auto json = run_stoke(dir.path(), json_args);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto result = nlohmann::json::parse(json.out);
  EXPECT_EQ(result["images"], 16);
  EXPECT_EQ(result["skipped"], 0);
  EXPECT_EQ(result["left_out"], 2) << json.out;
  ASSERT_EQ(result["left_out_files"].size(), 2u) << json.out;
  EXPECT_THAT(json.out, HasSubstr("{\"file\":\"" + shard.bad_label + "\",\"reason\":\"not a decimal class label"));
  EXPECT_THAT(json.out, HasSubstr("{\"file\":\"" + shard.symlink + "\",\"reason\":\"not a regular file"));

  const auto text = run_stoke(dir.path(), args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.err, HasSubstr("stoke evaluate: left out of " + shard.shard.string() + ": " + shard.bad_label));
  EXPECT_THAT(text.err, HasSubstr("stoke evaluate: left out of " + shard.shard.string() + ": " + shard.symlink));
  EXPECT_THAT(text.out, HasSubstr("16 images, 0 skipped"));
  EXPECT_THAT(text.out, HasSubstr("2 left out when the dataset opened"));
}

TEST(EvaluateCliHelp, ExplainsTheOptions) {
  const TempDir dir;
  const auto run = run_stoke(dir.path(), {"evaluate", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option : {"--checkpoint", "--data", "--batch", "--device", "--threads", "--json"}) {
    EXPECT_THAT(run.out, HasSubstr(option));
  }
}

}  // namespace
}  // namespace stoke::nodes
