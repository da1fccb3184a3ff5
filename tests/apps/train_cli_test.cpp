// `stoke train`, run as a program on a small generated shapes dataset: a short run prints one JSON
// object per epoch and writes checkpoints, --resume continues from one, and each kind of bad input
// ends with a one-line error naming the problem and a non-zero exit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <map>
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
using stoke::test::run_stoke;
using test::TempDir;
using ::testing::HasSubstr;

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto made = run_stoke(dir_.path(), {"gen-shapes", "--out", data().string(), "--classes", "3", "--train", "32",
                                              "--val", "8", "--size", "32", "--seed", "2", "--quiet"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
  }
  fs::path data() const { return dir_.path() / "shapes"; }
  fs::path scratch() const { return dir_.path(); }
  // A short run on the generated data, in JSON, with checkpoints.
  std::vector<std::string> base(int epochs) const {
    return {"train",
            "--data",
            (data() / "train").string(),
            "--epochs",
            std::to_string(epochs),
            "--batch",
            "16",
            "--device",
            "cpu",
            "--json",
            "--checkpoint",
            (dir_.path() / "ck").string()};
  }

  TempDir dir_;
};

TEST_F(TrainCli, PrintsAnEpochPerLineAndWritesCheckpoints) {
  const auto run = run_stoke(scratch(), base(2));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 3u) << run.out;  // two epochs and the summary
  for (const char* key : {"\"epoch\"", "\"train_loss\"", "\"val_top1\"", "\"val_top5\"", "\"images_per_sec\"",
                          "\"compute_busy\"", "\"skipped\"", "\"checkpoint\""}) {
    EXPECT_THAT(lines[0], HasSubstr(key));
  }
  EXPECT_THAT(lines[0], HasSubstr("\"epoch\":1"));
  EXPECT_THAT(lines[1], HasSubstr("\"epoch\":2"));
  EXPECT_THAT(lines[2], HasSubstr("\"final\":true"));
  EXPECT_THAT(lines[2], HasSubstr("\"epochs\":2"));
  // Three classes: every label is within the top 5.
  EXPECT_THAT(lines[1], HasSubstr("\"val_top5\":1,"));
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
  ASSERT_EQ(lines.size(), 3u) << run.out;
  EXPECT_THAT(lines[0], HasSubstr("\"epoch\":2"));
  EXPECT_THAT(lines[1], HasSubstr("\"epoch\":3"));
}

TEST_F(TrainCli, BadInputEndsWithAnErrorNamingIt) {
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string says;
  };
  const fs::path corrupt = dir_.path() / "corrupt.safetensors";
  test::write_text(corrupt, "not a checkpoint at all");
  const fs::path bad_config = dir_.path() / "bad.conf";
  test::write_text(bad_config, "epochs = 1\ncolour = blue\n");
  fs::create_directories(dir_.path() / "empty");
  fs::create_directories(dir_.path() / "one_class" / "only");
  test::write_bytes(dir_.path() / "one_class" / "only" / "a.jpg", test::small_jpeg(1, 32, 32));
  const std::string train = (data() / "train").string();
  const std::vector<Case> cases = {
      {{"train", "--data", (dir_.path() / "missing").string(), "--device", "cpu"}, 1, "missing"},
      {{"train", "--data", (dir_.path() / "empty").string(), "--device", "cpu"}, 1, "no class folders"},
      {{"train", "--data", (dir_.path() / "one_class").string(), "--batch", "1", "--device", "cpu"}, 1, "at least two"},
      {{"train", "--data", train, "--batch", "1000", "--device", "cpu"}, 1, "fewer than one batch"},
      {{"train", "--data", train, "--precision", "bf16", "--device", "cpu"}, 2, "needs a CUDA device"},
      {{"train", "--data", train, "--precision", "fp8"}, 2, "--precision"},
      {{"train", "--data", train, "--channels-last", "maybe"}, 2, "--channels-last must be auto, on or off"},
      {{"train", "--data", train, "--schedule", "linear"}, 2, "linear"},
      {{"train", "--data", train, "--epochs", "-1"}, 2, "--epochs"},
      {{"train", "--data", train, "--transform", "sharpen", "--transform", "normalize", "--device", "cpu"},
       1,
       "sharpen"},
      {{"train", "--data", train, "--transform", "normalize", "--transform", "random_horizontal_flip"},
       2,
       "normalize must be the last"},
      {{"train", "--data", train, "--format", "tiff"}, 2, "--format"},
      {{"train", "--data", train, "--stall-limit", "-1"}, 2, "--stall-limit"},
      {{"train", "--data", train, "--on-stall", "abort"}, 2, "--on-stall"},
      {{"train", "--data", train, "--format", "packed", "--device", "cpu"}, 1, "needs a file"},
      {{"train", "--data", train, "--plugin", (dir_.path() / "libnothing.so").string(), "--device", "cpu"},
       1,
       "libnothing.so"},
      {{"train", "--data", train, "--resume", corrupt.string(), "--device", "cpu"}, 1, "corrupt.safetensors"},
      {{"train", "--data", train, "--config", (dir_.path() / "missing.conf").string()}, 2, "missing.conf"},
      {{"train", "--data", train, "--config", bad_config.string()}, 2, "bad.conf"},
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
  const auto run =
      run_stoke(scratch(), {"train", "--data", (data() / "train").string(), "--model", "mobilenet", "--batch", "16",
                            "--device", "cpu", "--resume", (dir_.path() / "ck" / "last.safetensors").string()});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("last.safetensors"));
}

// The bytes of a file, to compare checkpoints.
std::string bytes_of(const fs::path& path) { return stoke::test::slurp(path); }

// Whatever the thread count, and whatever the layout the model computes in: --channels-last on
// takes the CPU through NCHW copies, and checkpoints are NCHW either way.
TEST_F(TrainCli, DeterministicWeightsWhateverTheThreadCountAndLayout) {
  const std::vector<std::vector<std::string>> runs = {
      {"--threads", "1"}, {"--threads", "2"}, {"--threads", "2", "--channels-last", "on"}};
  for (std::size_t i = 0; i < runs.size(); ++i) {
    auto args = base(1);
    args.back() = (dir_.path() / ("ck" + std::to_string(i))).string();
    args.push_back("--deterministic");
    args.insert(args.end(), runs[i].begin(), runs[i].end());
    const auto run = run_stoke(scratch(), args);
    ASSERT_EQ(run.exit_code, 0) << run.err;
  }
  const std::string one = bytes_of(dir_.path() / "ck0" / "last.safetensors");
  ASSERT_FALSE(one.empty());
  EXPECT_TRUE(one == bytes_of(dir_.path() / "ck1" / "last.safetensors")) << "--threads 2";
  EXPECT_TRUE(one == bytes_of(dir_.path() / "ck2" / "last.safetensors")) << "--channels-last on";
  // --deterministic is a promise of the CPU device only.
  const auto cuda =
      run_stoke(scratch(), {"train", "--data", (data() / "train").string(), "--deterministic", "--device", "cuda:0"});
  EXPECT_NE(cuda.exit_code, 0);
}

// Ctrl-C in the middle of an epoch, then --resume: the weights at the end are those of a run that
// was never interrupted, bit for bit (the CPU device is deterministic). The signal lands in the
// second of three epochs, so the resumed run also goes through a whole epoch after the cut one.
TEST_F(TrainCli, ResumeAfterCtrlCMatchesAnUninterruptedRun) {
  // Enough images that an epoch lasts a while: 3 classes x 300, trained at 16 px (a quarter of the
  // arithmetic of 32 px, which keeps the three runs short under ASan too).
  const fs::path big = dir_.path() / "big";
  ASSERT_EQ(run_stoke(scratch(), {"gen-shapes", "--out", big.string(), "--classes", "3", "--train", "300", "--val", "4",
                                  "--size", "32", "--seed", "3", "--quiet"})
                .exit_code,
            0);
  const auto args = [&](const std::string& folder) {
    std::vector<std::string> a{"train", "--data", (big / "train").string(), "--checkpoint",
                               (dir_.path() / folder).string()};
    a.insert(a.end(), {"--epochs", "3", "--batch", "16", "--size", "16", "--device", "cpu", "--json"});
    return a;
  };
  ASSERT_EQ(run_stoke(scratch(), args("whole")).exit_code, 0);

  // The interrupted run: SIGINT once the first epoch's line is out, so it lands in the second.
  std::string command = std::string("'") + STOKE_CLI + "'";
  for (const std::string& a : args("cut")) command += " '" + a + "'";
  const fs::path out = dir_.path() / "cut.out", err = dir_.path() / "cut.err";
  command += " >'" + out.string() + "' 2>'" + err.string() + "' & pid=$!; " +
             "for i in $(seq 1 600); do grep -q epoch '" + out.string() +
             "' && break; sleep 0.01; done; kill -INT $pid; wait $pid";
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  const int cut_exit = WEXITSTATUS(status);
  if (cut_exit == 0) GTEST_SKIP() << "the run ended before the signal came";
  ASSERT_EQ(cut_exit, 130) << bytes_of(err);
  EXPECT_THAT(bytes_of(err), HasSubstr("--resume"));

  auto resume = args("cut");
  resume.insert(resume.end(), {"--resume", (dir_.path() / "cut" / "last.safetensors").string()});
  const auto resumed = run_stoke(scratch(), resume);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const std::string whole = bytes_of(dir_.path() / "whole" / "last.safetensors");
  ASSERT_FALSE(whole.empty());
  EXPECT_TRUE(whole == bytes_of(dir_.path() / "cut" / "last.safetensors"))
      << "the resumed run's weights differ from the uninterrupted run's";
}

TEST_F(TrainCli, ReadsOptionsFromAConfigFileTheCommandLineWins) {
  const fs::path config = dir_.path() / "run.conf";
  test::write_text(config, "# a long run's settings\ndata = " + (data() / "train").string() +
                               "\nepochs = 3\nbatch = 16\ndevice = cpu\njson = true\n"
                               "transform = resize size=32\ntransform = normalize\n");
  const auto run = run_stoke(scratch(), {"train", "--config", config.string(), "--epochs", "1"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 2u) << run.out;  // --epochs 1 from the command line, JSON from the file
  EXPECT_THAT(lines[1], HasSubstr("\"final\":true"));
}

TEST_F(TrainCli, CorruptImagesAreSkippedAndListedOnceWithTheirEpochs) {
  const fs::path first_class = *fs::directory_iterator(data() / "train");
  test::write_text(first_class / "broken.jpg", "this is no JPEG");
  auto args = base(2);
  args.insert(args.end(),
              {"--trace", (dir_.path() / "trace.json").string(), "--report", (dir_.path() / "run.html").string()});
  const auto run = run_stoke(scratch(), args);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 3u) << run.out;
  EXPECT_THAT(lines[0], HasSubstr("\"skipped\":1"));
  EXPECT_THAT(lines[1], HasSubstr("\"skipped\":1"));
  // The run's total counts a skip per epoch, and lists the file once with both epochs.
  EXPECT_THAT(lines[2], HasSubstr("\"skipped\":2,"));
  EXPECT_THAT(lines[2], HasSubstr("broken.jpg\",\"reason\":"));
  EXPECT_THAT(lines[2], HasSubstr("\"epochs\":[1,2]"));
  EXPECT_EQ(count_of(lines[2], "broken.jpg"), 1u) << lines[2];
  EXPECT_THAT(run.err, HasSubstr("stoke train: 1 file skipped (unreadable or corrupt):\n"));
  EXPECT_THAT(run.err, HasSubstr("broken.jpg (epochs 1, 2): decode: "));
  EXPECT_EQ(count_of(run.err, "broken.jpg"), 1u) << run.err;
  EXPECT_THAT(bytes_of(dir_.path() / "trace.json"), HasSubstr("traceEvents"));
  // By policy, the same file ends the run instead, naming it.
  auto strict = base(1);
  strict.insert(strict.end(), {"--on-error", "fail"});
  const auto failed = run_stoke(scratch(), strict);
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_THAT(failed.err, HasSubstr("broken.jpg"));
  // The report: one self-contained page listing the skipped file (scripts/check-report.sh renders
  // it in headless Chromium).
  const std::string report = bytes_of(dir_.path() / "run.html");
  EXPECT_THAT(report, HasSubstr("broken.jpg</td><td>epoch 1 train, epoch 2 train</td>"));
  EXPECT_THAT(report, HasSubstr("<div class=\"k\">files skipped</div><div class=\"v\">1</div>"));
  EXPECT_THAT(report, HasSubstr("small_cnn"));
  EXPECT_THAT(report, ::testing::Not(HasSubstr("http")));
}

TEST_F(TrainCli, RunsAPluginsTransform) {
  auto args = base(1);
  args.insert(args.end(), {"--plugin", STOKE_EXAMPLE_PLUGIN, "--transform", "resize size=32", "--transform",
                           "window center=128 width=200", "--transform", "normalize"});
  const auto run = run_stoke(scratch(), args);
  EXPECT_EQ(run.exit_code, 0) << run.err;
}

// A plugin's data format: --format names it (with its parameters), and "auto" recognises its files;
// the label it leaves out is counted. A format unknown without the plugin is a usage error.
TEST(TrainCliFormats, APluginsFormatTrainsByNameAndByGuess) {
  const TempDir dir;
  std::string labels;
  for (int i = 0; i < 17; ++i) labels += (i == 16 ? "9" : std::to_string(i % 4)) + "\n";  // 9: out of 0..5
  test::write_text(dir / "set.stripes", labels);
  const std::vector<std::string> base = {"train",
                                         "--plugin",
                                         STOKE_TEST_FORMAT_PLUGIN,
                                         "--data",
                                         (dir / "set.stripes").string(),
                                         "--device",
                                         "cpu",
                                         "--epochs",
                                         "1",
                                         "--batch",
                                         "4",
                                         "--size",
                                         "8",
                                         "--json"};
  for (const std::string format : {"auto", "stripes side=12"}) {
    auto args = base;
    args.insert(args.end(), {"--format", format});
    const auto run = run_stoke(dir.path(), args);
    ASSERT_EQ(run.exit_code, 0) << format << ": " << run.err;
    const auto summary = nlohmann::json::parse(lines_of(run.out).back());
    EXPECT_EQ(summary["images"], 16) << format;
    EXPECT_EQ(summary["left_out"], 1) << format;
  }
  const auto unknown = run_stoke(
      dir.path(), {"train", "--data", (dir / "set.stripes").string(), "--format", "stripes", "--device", "cpu"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("--format: unknown data format 'stripes'; known: cifar, coco,"));
  const auto bad =
      run_stoke(dir.path(), {"train", "--data", dir.path().string(), "--format", "coco", "--device", "cpu"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("missing required parameter 'annotations'"));
}

// A COCO set opens, but stoke train trains classifiers: it says so and where such data goes.
TEST(TrainCliFormats, ACocoSetIsRefusedNamingWhatReadsIt) {
  const TempDir dir;
  test::write_bytes(dir / "images" / "a.jpg", test::small_jpeg(1, 40, 30));
  test::write_text(dir / "instances.json", R"({"images": [{"id": 1, "file_name": "a.jpg", "width": 40, "height": 30}],
    "categories": [{"id": 1, "name": "cat"}], "annotations": []})");
  const auto run = run_stoke(
      dir.path(), {"train", "--data", (dir / "images").string(), "--format",
                   "coco annotations=" + (dir / "instances.json").string(), "--device", "cpu", "--batch", "1"});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("images: its items carry no class labels (a COCO set's carry boxes"));
  EXPECT_THAT(run.err, HasSubstr("stoke bench pipeline"));
}

TEST_F(TrainCli, ReportsCallsPastTheStallLimitAndGoesOn) {
  auto args = base(1);
  args.insert(args.end(), {"--stall-limit", "0.001"});  // every train step runs longer than 1 ms
  const auto run = run_stoke(scratch(), args);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.err, HasSubstr("stoke: stage 'train' has been on item"));  // as found
  EXPECT_THAT(run.err, HasSubstr("ran past --stall-limit:"));                // and again at the end
}

// What the dataset leaves out when it opens (a tar member whose .cls is not a number, a symlink
// member) trains with those samples dropped, but never silently: the final JSON object counts and
// names them apart from the skipped files, the text mode lists them before training, and the
// report has a table of them apart from the skipped files'.
TEST(TrainCliLeftOut, WhatTheDatasetLeavesOutIsCountedAndNamedApartFromTheSkips) {
  const stoke::nodes::test::TempDir dir;
  const stoke::test::LeftOutShard shard = stoke::test::shard_with_left_out_members(dir.path());
  const std::vector<std::string> args = {"train",   "--data", shard.shard.string(), "--device", "cpu", "--epochs", "1",
                                         "--batch", "4"};

  auto json_args = args;
  json_args.insert(json_args.end(), {"--json", "--report", (dir.path() / "run.html").string()});
  const auto json = run_stoke(dir.path(), json_args);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto lines = lines_of(json.out);
  ASSERT_EQ(lines.size(), 2u) << json.out;  // the epoch and the summary
  const auto summary = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(summary["final"], true);
  EXPECT_EQ(summary["images"], 16);  // the 16 good samples, and only they
  EXPECT_EQ(summary["left_out"], 2);
  EXPECT_EQ(summary["skipped"], 0);
  EXPECT_TRUE(summary["skipped_files"].empty()) << lines[1];
  std::map<std::string, std::string> left_out;
  for (const auto& f : summary["left_out_files"]) left_out[f["file"].get<std::string>()] = f["reason"];
  EXPECT_EQ(left_out.size(), 2u) << lines[1];
  EXPECT_THAT(left_out[shard.bad_label], HasSubstr("not a decimal class label")) << lines[1];
  EXPECT_THAT(left_out[shard.symlink], HasSubstr("not a regular file")) << lines[1];
  for (const char* key : {"\"epoch\"", "\"skipped\"", "\"checkpoint\""})
    EXPECT_THAT(lines[0], HasSubstr(key));  // the epoch's object as before

  const std::string report = stoke::test::slurp(dir.path() / "run.html");
  const auto skipped_at = report.find("<h2>Skipped files</h2>");
  const auto left_out_at = report.find("<h2>Left out of the dataset</h2>");
  ASSERT_NE(skipped_at, std::string::npos);
  ASSERT_NE(left_out_at, std::string::npos);
  const std::string left_out_section = report.substr(left_out_at);
  EXPECT_THAT(left_out_section, HasSubstr("<summary>2 files</summary>"));
  EXPECT_THAT(left_out_section, HasSubstr("<td>" + shard.bad_label + "</td>"));
  EXPECT_THAT(left_out_section, HasSubstr("<td>" + shard.symlink + "</td>"));
  EXPECT_THAT(report, HasSubstr("<div class=\"k\">files skipped</div><div class=\"v\">0</div>"));
  EXPECT_THAT(report, HasSubstr("<div class=\"k\">left out of the data</div><div class=\"v\">2</div>"));

  const auto text = run_stoke(dir.path(), args);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const std::string prefix = "stoke train: left out of " + shard.shard.string() + ": ";
  EXPECT_THAT(text.err, HasSubstr(prefix + shard.bad_label + " (not a decimal class label"));
  EXPECT_THAT(text.err, HasSubstr(prefix + shard.symlink + " (not a regular file"));
  EXPECT_EQ(count_of(text.err, "left out of"), 2u) << text.err;
  EXPECT_THAT(text.err, ::testing::Not(HasSubstr("skipped (unreadable or corrupt)")));
}

TEST(TrainCliHelp, ExplainsTheOptions) {
  const stoke::nodes::test::TempDir dir;
  const auto run = run_stoke(dir.path(), {"train", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option :
       {"--data", "--val", "--format", "--model", "--epochs", "--precision", "--resume", "--checkpoint", "--plugin",
        "--deterministic", "--config", "--trace", "--json", "--stall-limit", "--on-stall"}) {
    EXPECT_THAT(run.out, HasSubstr(option));
  }
}

}  // namespace
}  // namespace stoke::nodes
