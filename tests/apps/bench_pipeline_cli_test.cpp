// `stoke bench pipeline`, run as a program on a folder with bad files among good ones: with the
// default policy every bad file is skipped, counted and named, and images + skipped equals the
// files read; with --on-error fail the run stops with a message naming a bad file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli_test_support.hpp"
#include "dataset_test_support.hpp"
#include "left_out_shard.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

using Result = stoke::test::CliResult;
using stoke::test::run_stoke;

// A JPEG whose frame header claims 65535 x 65535.
std::vector<std::byte> bomb_jpeg() {
  auto bytes = test::small_jpeg(99, 40, 40);
  for (std::size_t i = 0; i + 8 < bytes.size(); ++i) {
    if (bytes[i] == std::byte{0xFF} && bytes[i + 1] == std::byte{0xC0}) {
      for (std::size_t k = 5; k <= 8; ++k) bytes[i + k] = std::byte{0xFF};
      return bytes;
    }
  }
  ADD_FAILURE() << "no SOF0 marker in the test JPEG";
  return bytes;
}

// 2 classes x 6 good 48x40 JPEGs, plus 5 bad files, all named bad_*.
const std::vector<std::string> bad_files = {"a/bad_truncated.jpg", "a/bad_empty.jpg", "b/bad_text.jpg", "b/bad_gif.gif",
                                            "b/bad_bomb.jpg"};

void make_corpus(const fs::path& root) {
  for (const char* cls : {"a", "b"}) {
    for (int i = 0; i < 6; ++i) {
      test::write_bytes(root / cls / ("good_" + std::to_string(i) + ".jpg"),
                        test::small_jpeg(i + (cls[0] - 'a') * 10, 48, 40));
    }
  }
  auto truncated = test::small_jpeg(42, 48, 40);
  truncated.resize(truncated.size() / 2);
  test::write_bytes(root / bad_files[0], truncated);
  test::write_bytes(root / bad_files[1], {});
  test::write_text(root / bad_files[2], "this is not an image\n");
  test::write_text(root / bad_files[3], std::string("GIF89a\x01\x00\x01\x00\x00\x00\x00;", 14));
  test::write_bytes(root / bad_files[4], bomb_jpeg());
}

TEST(BenchPipelineCommand, SkipsCountsAndNamesEveryBadFile) {
  TempDir scratch;
  make_corpus(scratch / "data");
  const Result r = run_stoke(scratch.path(), {"bench", "pipeline", "--data", (scratch / "data").string(), "--size",
                                              "32", "--batch", "5", "--threads", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"images\":12,"));
  EXPECT_THAT(r.out, HasSubstr("\"skipped\":5,"));
  EXPECT_THAT(r.out, HasSubstr("\"files_read\":17,"));
  for (const auto& bad : bad_files) EXPECT_THAT(r.out, HasSubstr(fs::path(bad).filename().string())) << bad;
  EXPECT_EQ(r.out.find("good_"), std::string::npos) << "a good file was reported as skipped: " << r.out;
  // One JSON line.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1);
}

// What the dataset leaves out when it opens (a .cls that is not a number, a symlink member) is not
// a skip: --json counts and names it beside "skipped", which stays 0, and the text lists it.
TEST(BenchPipelineCommand, WhatTheDatasetLeavesOutIsCountedApartFromTheSkips) {
  TempDir scratch;
  const stoke::test::LeftOutShard shard = stoke::test::shard_with_left_out_members(scratch.path());
  const Result r = run_stoke(scratch.path(), {"bench", "pipeline", "--data", shard.shard.string(), "--size", "16",
                                              "--batch", "4", "--epochs", "1", "--threads", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["images"], 16);
  EXPECT_EQ(json["files_read"], 16);
  EXPECT_EQ(json["skipped"], 0);
  EXPECT_TRUE(json["skipped_files"].empty()) << r.out;
  EXPECT_EQ(json["left_out"], 2) << r.out;
  std::map<std::string, std::string> left_out;
  for (const auto& f : json["left_out_files"]) left_out[f["file"].get<std::string>()] = f["reason"];
  EXPECT_EQ(left_out.size(), 2u) << r.out;
  EXPECT_THAT(left_out[shard.bad_label], HasSubstr("not a decimal class label")) << r.out;
  EXPECT_THAT(left_out[shard.symlink], HasSubstr("not a regular file")) << r.out;

  const Result text = run_stoke(scratch.path(), {"bench", "pipeline", "--data", shard.shard.string(), "--size", "16",
                                                 "--batch", "4", "--epochs", "1", "--threads", "2"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const std::string prefix = "bench pipeline: left out of " + shard.shard.string() + ": ";
  EXPECT_THAT(text.err, HasSubstr(prefix + shard.bad_label + " (not a decimal class label"));
  EXPECT_THAT(text.err, HasSubstr(prefix + shard.symlink + " (not a regular file"));
  EXPECT_THAT(text.out, HasSubstr("skipped 0\n"));
  EXPECT_THAT(text.out, HasSubstr("left out when the dataset opened: 2"));
}

TEST(BenchPipelineCommand, FailPolicyStopsNamingTheFile) {
  TempDir scratch;
  make_corpus(scratch / "data");
  const Result r = run_stoke(scratch.path(), {"bench", "pipeline", "--data", (scratch / "data").string(), "--size",
                                              "32", "--batch", "5", "--on-error", "fail"});
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("bad_"));
}

TEST(BenchPipelineCommand, SameSeedSameImageCountWithEveryThreadCount) {
  TempDir scratch;
  make_corpus(scratch / "data");
  for (const char* threads : {"1", "3"}) {
    const Result r = run_stoke(scratch.path(), {"bench", "pipeline", "--data", (scratch / "data").string(), "--size",
                                                "32", "--batch", "4", "--epochs", "2", "--threads", threads, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("\"images\":24,")) << "threads " << threads;
    EXPECT_THAT(r.out, HasSubstr("\"files_read\":34,")) << "threads " << threads;
  }
}

TEST(BenchPipelineCommand, MissingDataNamesThePathAndUsageErrorsExit2) {
  TempDir scratch;
  const Result missing = run_stoke(scratch.path(), {"bench", "pipeline", "--data", (scratch / "nowhere").string()});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("nowhere"));
  const Result usage = run_stoke(scratch.path(), {"bench", "pipeline", "--data", "x", "--on-error", "maybe"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("--on-error"));
  const Result help = run_stoke(scratch.path(), {"bench", "pipeline", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--transform"));
}

TEST(BenchPipelineCommand, AutotuneOnListsTheSchedulersMovesAndOffMakesNone) {
  TempDir scratch;
  make_corpus(scratch / "data");
  for (const char* autotune : {"on", "off"}) {
    const Result r =
        run_stoke(scratch.path(), {"bench", "pipeline", "--data", (scratch / "data").string(), "--size", "32",
                                   "--batch", "4", "--epochs", "2", "--autotune", autotune, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("\"images\":24,")) << "autotune " << autotune;  // the scheduler loses nothing
    EXPECT_THAT(r.out, HasSubstr("\"decisions\":[")) << "autotune " << autotune;
    if (std::string_view(autotune) == "off") {
      EXPECT_THAT(r.out, HasSubstr("\"autotune\":false,"));
      EXPECT_THAT(r.out, HasSubstr("\"decisions\":[]"));
    }
  }
  const Result text = run_stoke(scratch.path(), {"bench", "pipeline", "--data", (scratch / "data").string(), "--size",
                                                 "32", "--batch", "4", "--autotune", "on"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("scheduler:"));
  const Result bad = run_stoke(scratch.path(), {"bench", "pipeline", "--data", "x", "--autotune", "maybe"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--autotune"));
}

// Beyond 8-bit RGB: a segmentation folder's masks, a column list's targets and --color keep show in
// the batch shape the command prints; a bad --format or --color is a usage error naming the choices.
TEST(BenchPipelineCommand, NewSourcesAndColourModesShowInTheBatchShape) {
  TempDir scratch;
  for (int i = 0; i < 4; ++i) {
    test::write_bytes(scratch / "pairs" / "images" / (std::to_string(i) + ".jpg"), test::small_jpeg(i, 40, 32));
    test::write_bytes(scratch / "pairs" / "masks" / (std::to_string(i) + ".jpg"),
                      encode_jpeg(cv::Mat(32, 40, CV_8UC1, cv::Scalar(i)), 100));
    test::write_bytes(scratch / "grey" / "a" / (std::to_string(i) + ".jpg"),
                      encode_jpeg(cv::Mat(32, 40, CV_8UC1, cv::Scalar(20 * i)), 90));
  }
  test::write_text(scratch / "pairs" / "list.csv",
                   "path,label,mask,age\nimages/0.jpg,0,masks/0.jpg,31\nimages/1.jpg,1,masks/1.jpg,42.5\n");
  const auto shape_line = [&](std::vector<std::string> args) {
    args.insert(args.begin(),
                {"bench", "pipeline", "--size", "16", "--batch", "2", "--transform", "random_resized_crop size=16"});
    const Result r = run_stoke(scratch.path(), args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::size_t at = r.out.find("batches of ");
    return at == std::string::npos ? r.out : r.out.substr(at, r.out.find('\n', at) - at);
  };
  EXPECT_EQ(shape_line({"--data", (scratch / "pairs").string()}), "batches of 2 x 16x16x3 nhwc u8 + mask u8");
  EXPECT_EQ(shape_line({"--data", (scratch / "pairs").string(), "--format", "segmentation", "--color", "keep"}),
            "batches of 2 x 16x16x3 nhwc u8 + mask u8");
  EXPECT_EQ(shape_line({"--data", (scratch / "pairs" / "list.csv").string()}),
            "batches of 2 x 16x16x3 nhwc u8 + mask u8 + targets age");
  EXPECT_EQ(shape_line({"--data", (scratch / "grey").string(), "--color", "keep"}), "batches of 2 x 16x16x1 nhwc u8");
  EXPECT_EQ(shape_line({"--data", (scratch / "grey").string()}), "batches of 2 x 16x16x3 nhwc u8");

  // COCO: boxes travel in the batch beside the pixels (room for 128 per item, iscrowd as their extra).
  test::write_text(scratch / "instances.json", R"({
    "images": [{"id": 1, "file_name": "0.jpg", "width": 40, "height": 32},
               {"id": 2, "file_name": "1.jpg", "width": 40, "height": 32}],
    "categories": [{"id": 3, "name": "cat"}],
    "annotations": [{"id": 1, "image_id": 2, "category_id": 3, "bbox": [4, 4, 20, 20]}]})");
  EXPECT_EQ(shape_line({"--data", (scratch / "pairs" / "images").string(), "--format",
                        "coco annotations=" + (scratch / "instances.json").string()}),
            "batches of 2 x 16x16x3 nhwc u8 + boxes 128 (1 extra)");

  const Result format = run_stoke(scratch.path(), {"bench", "pipeline", "--data", "x", "--format", "zip"});
  EXPECT_EQ(format.exit_code, 2);
  EXPECT_THAT(format.err, HasSubstr("--format: unknown data format 'zip'; known: cifar, coco,"));
  EXPECT_THAT(format.err, HasSubstr("segmentation"));
  const Result listed = run_stoke(scratch.path(), {"bench", "pipeline", "--list-formats"});
  EXPECT_EQ(listed.exit_code, 0);
  EXPECT_THAT(listed.out, HasSubstr("annotations=<string>"));
  const Result color = run_stoke(scratch.path(), {"bench", "pipeline", "--data", "x", "--color", "grey"});
  EXPECT_EQ(color.exit_code, 2);
  EXPECT_THAT(color.err, HasSubstr("keep"));
}

TEST(BenchPipelineCommand, UnknownTransformListsTheKnownOnes) {
  TempDir scratch;
  make_corpus(scratch / "data");
  const Result r = run_stoke(scratch.path(), {"bench", "pipeline", "--data", (scratch / "data").string(), "--transform",
                                              "random_crop size=32"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("random_resized_crop"));
}

}  // namespace
}  // namespace stoke::nodes
