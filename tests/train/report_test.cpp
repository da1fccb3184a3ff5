// RunRecorder (stoke/train/report.hpp): per-interval rates from cumulative pipeline counters, bounded
// memory, the phase's totals, skips and scheduler moves, a self-contained HTML page that escapes
// what it embeds, and record_fit feeding one from a training run.
#include "stoke/train/report.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"
#include "stoke/train/json.hpp"
#include "train_test_support.hpp"

namespace stoke::train {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;

graph::StageStats stage(std::string name, std::chrono::nanoseconds busy, std::chrono::nanoseconds starved,
                        std::chrono::nanoseconds blocked, int concurrency = 1) {
  graph::StageStats s;
  s.name = std::move(name);
  s.busy = busy;
  s.starved = starved;
  s.blocked = blocked;
  s.concurrency = concurrency;
  return s;
}

graph::Decision move(std::string stage, std::size_t from, std::size_t to, std::string why,
                     std::chrono::nanoseconds at) {
  graph::Decision d;
  d.kind = to > from ? graph::DecisionKind::grow : graph::DecisionKind::shrink;
  d.stage = std::move(stage);
  d.from = from;
  d.to = to;
  d.why = std::move(why);
  d.at = at;
  return d;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The JSON blob the page's script draws from.
std::string data_of(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  const auto begin = page.find(open);
  if (begin == std::string::npos) return {};
  const auto end = page.find("</script>", begin);
  return page.substr(begin + open.size(), end - begin - open.size());
}

TEST(RunRecorder, TurnsCumulativeCountersIntoRatesPerInterval) {
  RunRecorder rec;
  rec.begin_phase(10.0, 1, "train");
  // One second in: decode (2 calls allowed) was busy 1.5 s in all, i.e. 75% of what it may use.
  // The compute stage is the one named as the phase, not the last one (run_epoch's results stage).
  rec.sample(11.0, 100,
             {stage("read", 500ms, 200ms, 100ms), stage("decode", 1500ms, 0ms, 300ms, 2),
              stage("train", 900ms, 50ms, 0ms), stage("train results", 1ms, 900ms, 0ms)},
             0.8);
  // Two seconds later, from the first sample's counters.
  rec.sample(13.0, 500,
             {stage("read", 700ms, 1200ms, 100ms), stage("decode", 3500ms, 0ms, 300ms, 2),
              stage("train", 2900ms, 50ms, 0ms), stage("train results", 2ms, 2900ms, 0ms)},
             std::nullopt);

  const auto samples = rec.samples();
  ASSERT_EQ(samples.size(), 2u);
  const auto& a = samples[0];
  EXPECT_DOUBLE_EQ(a.seconds, 11.0);
  EXPECT_DOUBLE_EQ(a.interval, 1.0);
  EXPECT_EQ(a.phase, 0);
  EXPECT_DOUBLE_EQ(a.images_per_sec, 100.0);
  ASSERT_TRUE(a.gpu_busy.has_value());
  EXPECT_DOUBLE_EQ(*a.gpu_busy, 0.8);
  ASSERT_EQ(a.stages.size(), 4u);
  EXPECT_EQ(a.stages[0].name, "read");
  EXPECT_DOUBLE_EQ(a.stages[0].busy, 0.5);
  EXPECT_DOUBLE_EQ(a.stages[0].starved, 0.2);
  EXPECT_DOUBLE_EQ(a.stages[0].blocked, 0.1);
  EXPECT_DOUBLE_EQ(a.stages[1].busy, 0.75);
  EXPECT_DOUBLE_EQ(a.stages[1].blocked, 0.3);
  EXPECT_DOUBLE_EQ(a.compute_busy, 0.9);  // the compute step's, "train"

  const auto& b = samples[1];
  EXPECT_DOUBLE_EQ(b.interval, 2.0);
  EXPECT_DOUBLE_EQ(b.images_per_sec, 200.0);
  EXPECT_FALSE(b.gpu_busy.has_value());
  EXPECT_DOUBLE_EQ(b.stages[0].busy, 0.1);
  EXPECT_DOUBLE_EQ(b.stages[0].starved, 0.5);
  EXPECT_DOUBLE_EQ(b.stages[0].blocked, 0.0);
  EXPECT_DOUBLE_EQ(b.stages[1].busy, 0.5);
  EXPECT_DOUBLE_EQ(b.compute_busy, 1.0);
}

TEST(RunRecorder, ClampsFractionsAndIgnoresSamplesThatDoNotMoveForward) {
  RunRecorder rec;
  rec.begin_phase(0, 1, "train");
  rec.sample(1.0, 10, {stage("train", 3s, 0ms, 0ms)}, 1.7);  // more busy time than there was wall time
  rec.sample(1.0, 20, {stage("train", 4s, 0ms, 0ms)});       // no time passed
  rec.sample(0.5, 20, {stage("train", 4s, 0ms, 0ms)});       // back in time
  const auto samples = rec.samples();
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_DOUBLE_EQ(samples[0].compute_busy, 1.0);
  EXPECT_DOUBLE_EQ(*samples[0].gpu_busy, 1.0);
}

TEST(RunRecorder, EachPhaseCountsFromItsOwnStartAndZero) {
  RunRecorder rec;
  rec.begin_phase(0, 1, "train");
  rec.sample(2.0, 400, {stage("read", 1s, 0ms, 0ms), stage("train", 2s, 0ms, 0ms)});
  graph::RunReport train;
  train.elapsed = 3s;
  train.stages = {stage("read", 1500ms, 0ms, 0ms), stage("train", 2700ms, 0ms, 0ms)};
  rec.end_phase(3.0, 600, train);

  // The evaluation's pipeline is new: its counters start again from zero.
  rec.begin_phase(4.0, 1, "evaluate");
  rec.sample(5.0, 50, {stage("read", 250ms, 0ms, 0ms), stage("evaluate", 500ms, 0ms, 0ms)});

  const auto samples = rec.samples();
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_DOUBLE_EQ(samples[1].seconds, 3.0);  // end_phase's last sample, from the report's counters
  EXPECT_DOUBLE_EQ(samples[1].images_per_sec, 200.0);
  EXPECT_DOUBLE_EQ(samples[1].stages[0].busy, 0.5);
  EXPECT_DOUBLE_EQ(samples[1].compute_busy, 0.7);
  EXPECT_EQ(samples[2].phase, 1);
  EXPECT_DOUBLE_EQ(samples[2].interval, 1.0);
  EXPECT_DOUBLE_EQ(samples[2].images_per_sec, 50.0);
  EXPECT_DOUBLE_EQ(samples[2].stages[0].busy, 0.25);
  EXPECT_DOUBLE_EQ(samples[2].compute_busy, 0.5);
}

TEST(RunRecorder, StaysWithinItsSampleBoundAndKeepsTheRates) {
  RunRecorder rec(400);
  rec.begin_phase(0, 1, "train");
  // 100,000 samples 0.25 s apart: 80 images/s, read busy 40%, the compute step busy 90%.
  constexpr int n = 100'000;
  for (int i = 1; i <= n; ++i) {
    const std::int64_t ms = 250LL * i;
    rec.sample(static_cast<double>(ms) / 1e3, 20LL * i,
               {stage("read", std::chrono::milliseconds(ms * 4 / 10), 0ms, 0ms),
                stage("train", std::chrono::milliseconds(ms * 9 / 10), 0ms, 0ms)},
               0.5);
    if (i % 10 == 0) {
      ASSERT_LE(rec.samples().size(), rec.max_samples()) << "after sample " << i;
    }
  }
  const auto samples = rec.samples();
  EXPECT_GE(samples.size(), rec.max_samples() / 4);  // halved, not emptied
  double covered = 0;
  double previous = 0;
  for (const auto& s : samples) {
    EXPECT_GT(s.seconds, previous);
    previous = s.seconds;
    covered += s.interval;
    EXPECT_NEAR(s.images_per_sec, 80.0, 1e-6);
    EXPECT_NEAR(s.stages[0].busy, 0.4, 1e-6);
    EXPECT_NEAR(s.compute_busy, 0.9, 1e-6);
    EXPECT_NEAR(*s.gpu_busy, 0.5, 1e-9);
  }
  EXPECT_NEAR(covered, n * 0.25, 1e-6);  // every interval is still accounted for, once
}

TEST(RunRecorder, RejectsATooSmallSampleBound) { EXPECT_THROW(RunRecorder(8), std::invalid_argument); }

TEST(RunRecorder, EndPhaseRecordsTheReportsMovesAndSkipsWithinBounds) {
  RunRecorder rec(4000, 1, 3);  // one move and three skips listed
  rec.begin_phase(0, 1, "train");
  graph::RunReport report;
  report.elapsed = 10s;
  report.stages = {stage("decode", 16s, 1s, 2s, 2), stage("train", 9s, 1s, 0ms)};
  report.decisions = {move("decode", 1, 2, "train starved", 2s), move("decode", 2, 3, "still starved", 4s)};
  for (std::uint64_t i = 0; i < 5; ++i) report.skipped_items.push_back({"decode", i, "bad.jpg: not a JPEG"});
  report.skipped = 7;
  rec.end_phase(10.5, 1000, report);  // the pipeline ran from 0.5 s to 10.5 s

  const std::string data = data_of(rec.html("t", {}));
  EXPECT_THAT(data, HasSubstr(R"("name":"decode","busy":0.8,"starved":0.1,"blocked":0.2,"concurrency":2)"));
  EXPECT_THAT(data, HasSubstr(R"("t":2.5,"phase":0,"kind":"grow","stage":"decode","from":1,"to":2)"));
  EXPECT_THAT(data, Not(HasSubstr("still starved")));  // beyond the one move listed...
  const std::string page = rec.html("t", {});
  EXPECT_THAT(page, HasSubstr("and 1 more, not listed"));                 // ...but counted
  EXPECT_EQ(count(page, "bad.jpg: not a JPEG"), 3u);                      // the first three skips listed...
  EXPECT_THAT(page, HasSubstr("and 4 more skips, of files not listed"));  // ...of seven

  // Moves given live are not counted again from the report.
  RunRecorder live;
  live.begin_phase(0, 1, "train");
  live.decision(2.0, report.decisions[0]);
  live.end_phase(10.5, 1000, report);
  EXPECT_EQ(count(data_of(live.html("t", {})), "\"kind\":"), 1u);
}

TEST(RunRecorder, ListsWhatTheDatasetsLeftOutApartFromTheSkippedFilesWithinBounds) {
  RunRecorder empty;
  EXPECT_THAT(empty.html("t", {}), HasSubstr("<h2>Left out of the dataset</h2>"));

  RunRecorder rec(4000, 10, 3);  // three files listed
  LeftOut train_set{.count = 4,
                    .files = {{"train.tar#a.cls", "not a decimal class label"},
                              {"train.tar#b.jpg", "not a regular file (a link or a device)"},
                              {"train.tar#c<1>", "no image member"},
                              {"train.tar#d", "hidden"}}};
  rec.left_out("train.tar", train_set);
  rec.left_out("val.tar", LeftOut{.count = 2, .files = {{"val.tar#e.cls", "not a decimal class label"}}});
  rec.begin_phase(0, 1, "train");
  graph::RunReport report;
  report.elapsed = 1s;
  report.skipped_items.push_back({"decode", 0, "bad.jpg: not a JPEG"});
  report.skipped = 1;
  rec.end_phase(1, 10, report, {{"bad.jpg", "decode: not a JPEG", {0}}});

  const std::string page = rec.html("t", {});
  const auto section = page.find("<h2>Left out of the dataset</h2>");
  ASSERT_NE(section, std::string::npos);
  const std::string left_out = page.substr(section, page.find("</details>", section) - section);
  EXPECT_THAT(left_out, HasSubstr("<summary>6 files</summary>"));  // every one counted...
  EXPECT_THAT(left_out, HasSubstr("<td>train.tar#a.cls</td><td>train.tar</td><td>not a decimal class label</td>"));
  EXPECT_THAT(left_out, HasSubstr("train.tar#c&lt;1&gt;"));
  EXPECT_THAT(left_out, Not(HasSubstr("train.tar#d")));  // ...the first three listed
  EXPECT_THAT(left_out, Not(HasSubstr("val.tar#e.cls")));
  EXPECT_THAT(left_out, HasSubstr("and 3 more, not listed"));
  EXPECT_THAT(left_out, Not(HasSubstr("bad.jpg")));  // the skipped file is in its own table
  const auto skips = page.find("<h2>Skipped files</h2>");
  ASSERT_LT(skips, section);
  const std::string skipped = page.substr(skips, section - skips);
  EXPECT_THAT(skipped, HasSubstr("bad.jpg"));
  EXPECT_THAT(skipped, Not(HasSubstr("train.tar#a.cls")));
  EXPECT_THAT(page, HasSubstr("left out of the data</div><div class=\"v\">6</div>"));  // the summary's card
}

TEST(RunRecorder, WritesASelfContainedPageThatEscapesWhatItEmbeds) {
  RunRecorder rec;
  const std::string why = "train starved </script><b>\"quoted\" & more";
  rec.begin_phase(0, 1, "train");
  rec.sample(0.25, 32, {stage("read", 100ms, 0ms, 0ms), stage("train", 200ms, 0ms, 0ms)});
  rec.decision(0.3, move("decode", 2, 3, why, 300ms));
  rec.sample(0.5, 64, {stage("read", 200ms, 0ms, 0ms), stage("train", 400ms, 0ms, 0ms)});
  graph::RunReport report;
  report.elapsed = 600ms;
  report.stages = {stage("read", 240ms, 0ms, 0ms), stage("train", 480ms, 0ms, 0ms)};
  report.skipped_items = {{"decode", 7, "</script>broken.jpg"}};
  report.skipped = 1;
  rec.end_phase(0.6, 80, report);
  rec.epoch({.epoch = 1,
             .train_loss = 1.25,
             .train_top1 = 0.5,
             .val_top1 = 0.625,
             .val_top5 = 0.875,
             .images_per_sec = 133,
             .compute_busy = 0.8,
             .skipped = 1});

  stoke::nodes::test::TempDir dir;
  const fs::path path = dir / "report.html";
  rec.write_html(path, "stoke train <small_cnn>", {{"model", "small_cnn"}, {"data", "a&b"}});
  EXPECT_FALSE(fs::exists(dir / "report.html.tmp"));
  const std::string page = read(path);

  EXPECT_THAT(page, HasSubstr("<!DOCTYPE html>"));
  // Nothing to fetch: no URL, no external script, style, font or image.
  for (const char* external : {"http://", "https://", "src=", "<link", "@import", "url("})
    EXPECT_THAT(page, Not(HasSubstr(external))) << external;
  EXPECT_EQ(count(page, "<script"), 3u);   // the error handler, the data, the drawing
  EXPECT_EQ(count(page, "</script"), 3u);  // so nothing embedded closed one early

  const std::string data = data_of(page);
  ASSERT_FALSE(data.empty());
  EXPECT_THAT(data, Not(HasSubstr("<")));
  EXPECT_THAT(data, HasSubstr(R"(train starved \u003c/script\u003e\u003cb\u003e\"quoted\" \u0026 more)"));
  EXPECT_THAT(data, HasSubstr(R"("val_top1":0.625)"));
  EXPECT_THAT(data, HasSubstr(R"("name":"read")"));
  EXPECT_THAT(data, HasSubstr(R"("ips":[128,128,160])"));

  // The tables are HTML, escaped.
  EXPECT_THAT(page, HasSubstr("train starved &lt;/script&gt;&lt;b&gt;&quot;quoted&quot; &amp; more"));
  EXPECT_THAT(page, HasSubstr("decode 2 -&gt; 3"));
  EXPECT_THAT(page, HasSubstr("&lt;/script&gt;broken.jpg"));
  EXPECT_THAT(page, HasSubstr("<title>stoke train &lt;small_cnn&gt;</title>"));
  EXPECT_THAT(page, HasSubstr("<code>a&amp;b</code>"));
  EXPECT_THAT(page, Not(HasSubstr(why)));
}

TEST(RunRecorder, ADataParallelRunShowsEachRanksThroughputAndTheAllReduce) {
  RunRecorder rec;
  rec.epoch({.epoch = 1,
             .train_loss = 1,
             .train_top1 = 0.5,
             .val_top1 = std::nullopt,
             .val_top5 = std::nullopt,
             .images_per_sec = 200,
             .compute_busy = 0.9});
  stoke::nodes::test::TempDir dir;
  rec.write_html(dir / "alone.html", "alone", {});
  EXPECT_THAT(read(dir / "alone.html"), Not(HasSubstr("images/s by rank")));  // one process: no such column

  rec.epoch({.epoch = 2,
             .train_loss = 1,
             .train_top1 = 0.5,
             .val_top1 = std::nullopt,
             .val_top5 = std::nullopt,
             .images_per_sec = 200,
             .compute_busy = 0.9,
             .rank_images_per_sec = {101, 99},
             .allreduce_seconds = 2.5,
             .allreduce_hidden = 0.75});
  rec.write_html(dir / "ranks.html", "ranks", {});
  const std::string page = read(dir / "ranks.html");
  EXPECT_THAT(page, HasSubstr("images/s by rank"));
  EXPECT_THAT(page, HasSubstr("101 / 99"));
  EXPECT_THAT(page, HasSubstr("2.50"));
  EXPECT_THAT(data_of(page), HasSubstr(R"("rank_images_per_sec":[101,99])"));
  EXPECT_THAT(data_of(page), HasSubstr(R"("allreduce_hidden":0.75)"));
}

TEST(EpochJson, ADataParallelEpochCarriesEachRanksThroughputAndTheAllReduce) {
  EpochSummary s;
  s.epoch = 1;
  EXPECT_FALSE(to_json(s).contains("rank_images_per_sec"));  // one process
  s.rank_images_per_sec = {101.5, 99};
  s.allreduce_seconds = 4;
  s.allreduce_exposed_seconds = 1;
  const auto json = to_json(s);
  EXPECT_EQ(json.at("rank_images_per_sec").size(), 2u);
  EXPECT_EQ(json.at("allreduce_seconds"), 4);
  EXPECT_EQ(json.at("allreduce_hidden"), 0.75);  // 1 s of 4 waited for after backward
}

TEST(RunRecorder, AnUnwritablePathThrowsNamingIt) {
  RunRecorder rec;
  stoke::nodes::test::TempDir dir;
  const fs::path path = dir / "no-such-folder" / "report.html";
  try {
    rec.write_html(path, "t", {});
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
  }
  EXPECT_FALSE(fs::exists(path));
}

// record_fit: a fit() run recorded through its callbacks, the page rewritten after each epoch, and
// the caller's own hooks still called.
TEST(RecordFit, RecordsEachPassAndWritesThePageAfterEachEpoch) {
  const test::TempDir dir;
  const fs::path root = test::write_tiny_shapes(dir);
  test::TinyRun run(16, 2);
  RunRecorder rec;
  int epochs_seen = 0;
  std::size_t page_size_after_first = 0;
  const fs::path page = dir / "run.html";
  FitCallbacks callbacks;
  callbacks.on_epoch = [&](const EpochSummary& s) {
    ++epochs_seen;
    if (s.epoch == 1) page_size_after_first = read(page).size();  // already written for this epoch
    return true;
  };
  fit(run.trainer, open_dataset(root / "train"), open_dataset(root / "val"), run.options,
      record_fit(rec, std::move(callbacks), {.html = page, .title = "tiny", .settings = {{"model", "small_cnn"}}}));

  EXPECT_EQ(epochs_seen, 2);
  EXPECT_GT(page_size_after_first, 0u);
  const std::string data = data_of(read(page));
  // Two epochs of a training and an evaluation phase each, and a row per epoch.
  EXPECT_EQ(count(data, R"("name":"train","start")"), 2u);
  EXPECT_EQ(count(data, R"("name":"evaluate","start")"), 2u);
  EXPECT_THAT(data, HasSubstr(R"("epoch":2,"train_loss")"));
  EXPECT_THAT(read(page), HasSubstr("<code>small_cnn</code>"));
}

TEST(RecordFit, TheComputeBusyOfTheSummaryThePlotAndTheEpochTableAgree) {
  const test::TempDir dir;
  const fs::path root = test::write_tiny_shapes(dir);
  test::TinyRun run(16, 2);  // report_gpu_test does the same on a GPU
  RunRecorder rec;
  std::vector<double> cli;  // what `stoke train` prints per epoch
  FitCallbacks callbacks;
  callbacks.on_epoch = [&](const EpochSummary& s) {
    cli.push_back(s.train.compute_busy);
    return true;
  };
  const fs::path page = dir / "run.html";
  fit(run.trainer, open_dataset(root / "train"), open_dataset(root / "val"), run.options,
      record_fit(rec, std::move(callbacks), {.html = page, .title = "tiny", .settings = {}}));

  const auto data = nlohmann::json::parse(data_of(read(page)));
  ASSERT_EQ(data["epochs"].size(), 2u);
  for (std::size_t e = 0; e < 2; ++e)
    EXPECT_NEAR(data["epochs"][e]["compute_busy"].get<double>(), cli[e], 1e-3) << "the table is what the CLI prints";
  const test::ReportBusy busy = test::report_busy(read(page));
  // All three are the compute stage's ("train"), not the results stage's after it, which the
  // summary and the plot once took for it (0.1% where the table said 100%).
  ASSERT_GE(busy.train_stage, 0);
  EXPECT_NEAR(busy.table, busy.train_stage, 0.05) << "the epoch table is the train stage's";
  EXPECT_NEAR(busy.card, busy.drawn, 0.002) << "the card is the plot's mean";
  EXPECT_NEAR(busy.card, busy.table, 0.05) << "the card and the epoch table";
  EXPECT_EQ(busy.gpu_card, -1) << "no GPU card without NVML";
}

TEST(RecordFit, TheGpusUtilizationIsACardAndALineOfItsOwnBesideTheComputeBusy) {
  const test::TempDir dir;
  const fs::path root = test::write_tiny_shapes(dir);
  test::TinyRun run(16, 1);
  RunRecorder rec;
  const fs::path page = dir / "run.html";
  fit(run.trainer, open_dataset(root / "train"), open_dataset(root / "val"), run.options,
      record_fit(rec, {},
                 {.html = page, .title = "t", .settings = {}, .gpu_busy = [] { return std::optional<double>(0.37); }}));
  const test::ReportBusy busy = test::report_busy(read(page));
  EXPECT_NEAR(busy.gpu_card, 0.37, 1e-9);
  // The compute busy is still the compute step's, not NVML's.
  EXPECT_NEAR(busy.table, busy.train_stage, 0.05);
  EXPECT_NEAR(busy.card, busy.drawn, 0.002);
  EXPECT_NEAR(busy.card, busy.table, 0.05);
  const auto data = nlohmann::json::parse(data_of(read(page)));
  EXPECT_TRUE(data["gpu_known"].get<bool>());
  std::size_t drawn = 0;  // the plot's GPU line: the samples taken while training
  for (const auto& v : data["samples"]["gpu"]) {
    if (v.is_null()) continue;
    EXPECT_NEAR(v.get<double>(), 0.37, 1e-9);
    ++drawn;
  }
  EXPECT_GT(drawn, 0u);
}

}  // namespace
}  // namespace stoke::train
