// `stoke classify`, run as a program with a checkpoint trained once for the suite on a small
// generated shapes dataset: the text and JSON output, --top, probabilities that sum to 1, an
// unreadable image among good ones, and each kind of bad input ending with a one-line error
// naming the problem and a non-zero exit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using stoke::test::lines_of;
using stoke::test::plain_safetensors;
using stoke::test::run_stoke;
using test::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

// "FILE: a 0.912, b 0.051" -> {{"a", 0.912}, {"b", 0.051}}.
struct Guess {
  std::string name;
  double probability;
};
std::vector<Guess> guesses_of(const std::string& line, const std::string& file) {
  EXPECT_EQ(line.rfind(file + ": ", 0), 0u) << line;
  std::vector<Guess> out;
  std::istringstream in(line.substr(file.size() + 2));
  for (std::string item; std::getline(in, item, ',');) {
    std::istringstream words(item);
    Guess g{};
    words >> g.name >> g.probability;
    out.push_back(g);
  }
  return out;
}

class ClassifyCli : public ::testing::Test {
 protected:
  // One dataset and one checkpoint for every test: training is the slow part.
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    const auto made = run_stoke(dir_->path(), {"gen-shapes", "--out", data().string(), "--classes", "3", "--train",
                                               "32", "--val", "8", "--size", "32", "--seed", "2", "--quiet"});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    const auto trained =
        run_stoke(dir_->path(), {"train", "--data", (data() / "train").string(), "--epochs", "1", "--batch", "16",
                                 "--device", "cpu", "--json", "--checkpoint", (dir_->path() / "ck").string()});
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    for (const auto& entry : fs::recursive_directory_iterator(data() / "val")) {
      if (entry.path().extension() == ".jpg") images_.push_back(entry.path().string());
    }
    std::sort(images_.begin(), images_.end());
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static fs::path data() { return dir_->path() / "shapes"; }
  static std::string checkpoint() { return (dir_->path() / "ck" / "last.safetensors").string(); }
  static std::set<std::string> class_names() {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(data() / "val")) names.insert(entry.path().filename().string());
    return names;
  }
  fs::path scratch() const { return scratch_.path(); }

  static std::unique_ptr<TempDir> dir_;
  static std::vector<std::string> images_;
  TempDir scratch_;
};

std::unique_ptr<TempDir> ClassifyCli::dir_;
std::vector<std::string> ClassifyCli::images_;

TEST_F(ClassifyCli, PrintsEveryClassWithProbabilitiesSummingToOne) {
  ASSERT_GE(images_.size(), 2u);
  const auto run = run_stoke(
      scratch(), {"classify", "--checkpoint", checkpoint(), "--top", "3", "--device", "cpu", images_[0], images_[1]});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 2u) << run.out;
  const std::set<std::string> names = class_names();
  for (std::size_t i = 0; i < 2; ++i) {
    const std::vector<Guess> guesses = guesses_of(lines[i], images_[i]);  // in the command line's order
    ASSERT_EQ(guesses.size(), 3u) << lines[i];
    double sum = 0;
    std::set<std::string> seen;
    for (std::size_t k = 0; k < guesses.size(); ++k) {
      EXPECT_TRUE(names.contains(guesses[k].name)) << guesses[k].name;
      EXPECT_GE(guesses[k].probability, 0.0);
      if (k > 0) {
        EXPECT_LE(guesses[k].probability, guesses[k - 1].probability) << lines[i];
      }
      sum += guesses[k].probability;
      seen.insert(guesses[k].name);
    }
    EXPECT_EQ(seen, names);                    // every class once
    EXPECT_NEAR(sum, 1.0, 3 * 0.0005 + 1e-6);  // printed with 3 decimals
  }
}

TEST_F(ClassifyCli, TopLimitsTheClassesPrinted) {
  const auto one =
      run_stoke(scratch(), {"classify", "--checkpoint", checkpoint(), "--top", "1", "--device", "cpu", images_[0]});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const auto lines = lines_of(one.out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(guesses_of(lines[0], images_[0]).size(), 1u) << lines[0];

  // More than the model has: all of them.
  const auto many =
      run_stoke(scratch(), {"classify", "--checkpoint", checkpoint(), "--top", "50", "--device", "cpu", images_[0]});
  ASSERT_EQ(many.exit_code, 0) << many.err;
  EXPECT_EQ(guesses_of(lines_of(many.out).at(0), images_[0]).size(), 3u) << many.out;
}

TEST_F(ClassifyCli, JsonIsOneObjectPerImageWithFileAndTopClasses) {
  const auto run = run_stoke(scratch(), {"classify", "--checkpoint", checkpoint(), "--top", "2", "--device", "cpu",
                                         "--json", images_[0], images_[1], images_[2]});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");  // --json: nothing but the objects, no device line
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 3u) << run.out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].front(), '{');
    EXPECT_EQ(lines[i].back(), '}');
    EXPECT_THAT(lines[i], HasSubstr("\"file\":\"" + images_[i] + "\""));
    EXPECT_THAT(lines[i], HasSubstr("\"top\":[{\"class\":"));
    std::size_t classes = 0;
    for (std::size_t at = lines[i].find("\"probability\":"); at != std::string::npos;
         at = lines[i].find("\"probability\":", at + 1)) {
      ++classes;
    }
    EXPECT_EQ(classes, 2u) << lines[i];
  }
}

TEST_F(ClassifyCli, AnUnreadableImageIsReportedAndTheOthersStillClassified) {
  const fs::path broken = scratch() / "broken.jpg";
  test::write_bytes(broken, test::distinct_bytes(7, 300));
  const std::string missing = (scratch() / "missing.jpg").string();
  const auto run = run_stoke(scratch(), {"classify", "--checkpoint", checkpoint(), "--device", "cpu", images_[0],
                                         broken.string(), missing, images_[1]});
  EXPECT_EQ(run.exit_code, 1) << run.err;
  const auto out = lines_of(run.out);
  ASSERT_EQ(out.size(), 2u) << run.out;
  EXPECT_EQ(out[0].rfind(images_[0] + ": ", 0), 0u);
  EXPECT_EQ(out[1].rfind(images_[1] + ": ", 0), 0u);
  const auto err = lines_of(run.err);
  ASSERT_EQ(err.size(), 3u) << run.err;  // the device line, then one line per bad file
  EXPECT_THAT(err[1], HasSubstr(broken.string()));
  EXPECT_THAT(err[2], HasSubstr(missing));
}

TEST_F(ClassifyCli, BadInputEndsWithAnErrorNamingIt) {
  const std::string truncated = (scratch() / "truncated.safetensors").string();
  {
    const std::string whole = stoke::test::slurp(checkpoint());
    test::write_text(truncated, std::string_view(whole).substr(0, whole.size() / 2));
  }
  const std::string noise = (scratch() / "noise.safetensors").string();
  test::write_bytes(noise, test::distinct_bytes(3, 4096));
  const std::string plain = (scratch() / "plain.safetensors").string();
  test::write_bytes(plain, plain_safetensors());
  const std::string missing = (scratch() / "missing.safetensors").string();

  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::vector<std::string> says;
  };
  const std::string image = images_[0];
  const std::vector<Case> cases = {
      {{"classify", "--checkpoint", missing, image}, 1, {missing}},
      {{"classify", "--checkpoint", truncated, image}, 1, {truncated}},
      {{"classify", "--checkpoint", noise, image}, 1, {noise}},
      {{"classify", "--checkpoint", plain, image}, 1, {plain, "stoke train"}},
      {{"classify", "--checkpoint", checkpoint()}, 2, {"no images"}},
      {{"classify", image}, 2, {"--checkpoint"}},
      {{"classify", "--checkpoint", checkpoint(), "--top", "0", image}, 2, {"--top"}},
  };
  for (const Case& c : cases) {
    auto args = c.args;
    args.insert(args.end(), {"--device", "cpu"});
    const auto run = run_stoke(scratch(), args);
    EXPECT_EQ(run.exit_code, c.exit_code) << c.says[0] << ": " << run.err;
    for (const std::string& says : c.says) EXPECT_THAT(run.err, HasSubstr(says));
    EXPECT_THAT(run.err, Not(HasSubstr("terminate")));
    EXPECT_EQ(run.out, "");
    // One line: the device line (--device cpu) and the error.
    EXPECT_LE(lines_of(run.err).size(), 2u) << run.err;
  }
}

TEST(ClassifyCliHelp, ExplainsTheOptions) {
  const TempDir dir;
  const auto run = run_stoke(dir.path(), {"classify", "--help"});
  EXPECT_EQ(run.exit_code, 0);
  for (const char* option : {"--checkpoint", "--top", "--device", "--json"}) EXPECT_THAT(run.out, HasSubstr(option));
}

}  // namespace
}  // namespace stoke::nodes
