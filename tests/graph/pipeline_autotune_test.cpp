// The scheduler on a running pipeline: stages whose cost is work done (not sleep), in a known
// proportion, start with one call each; the scheduler must end with more calls on the expensive
// one. Also: what it reports, what it draws in the trace, and that without autotune nothing moves.
// No assertion on time: the runs are bounded by a stop after a few seconds, judged on allocation.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

/// `rounds` rounds of integer mixing: CPU work in proportion to `rounds`, whatever the machine.
std::uint64_t work(std::uint64_t x, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
  }
  return x;
}

constexpr int light_rounds = 20'000;
constexpr int heavy_rounds = 4 * light_rounds;

/// Stops `pipe` after `seconds` unless the run ended first.
class StopAfter {
 public:
  StopAfter(Pipeline& pipe, std::chrono::milliseconds after)
      : thread_([this, &pipe, after] {
          std::unique_lock lock(mutex_);
          if (!done_cv_.wait_for(lock, after, [this] { return done_; })) pipe.stop();
        }) {}
  ~StopAfter() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    done_cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::thread thread_;
};

struct TunedRun {
  RunReport report;
  std::vector<Decision> logged;  // as on_decision saw them
};

TunedRun run_light_heavy(std::optional<AutotuneOptions> autotune, const std::filesystem::path& trace = {}) {
  TunedRun run;
  std::mutex log_mutex;
  if (autotune)
    autotune->on_decision = [&](const Decision& d) {
      std::lock_guard lock(log_mutex);
      run.logged.push_back(d);
    };
  PipelineOptions options{.max_in_flight = 64, .trace = !trace.empty(), .autotune = autotune};
  Pipeline pipe(options);
  std::atomic<std::uint64_t> sum{0};
  pipe.source("numbers", [i = std::uint64_t{0}]() mutable -> std::optional<std::uint64_t> { return i++; })
      .map("light", [](std::uint64_t x) { return work(x, light_rounds); }, {.concurrency = parallel(1, 4, 1)})
      .map("heavy", [](std::uint64_t x) { return work(x, heavy_rounds); }, {.concurrency = parallel(1, 4, 1)})
      .sink("sum", [&](std::uint64_t x) { sum.fetch_add(x & 1); });
  {
    StopAfter stop(pipe, std::chrono::seconds(3));
    run.report = pipe.run();
  }
  if (!trace.empty()) pipe.write_trace(trace);
  return run;
}

TEST(PipelineAutotune, FavoursTheExpensiveStage) {
  const TunedRun run = run_light_heavy(AutotuneOptions{.interval = std::chrono::milliseconds(50)});
  const auto& light = stage_named(run.report.stages, "light");
  const auto& heavy = stage_named(run.report.stages, "heavy");
  std::ostringstream table;
  print(table, run.report);
  EXPECT_GT(heavy.concurrency, light.concurrency) << table.str();
  EXPECT_EQ(light.concurrency, 1) << "light was never the bottleneck\n" << table.str();
  const Decision* first_grow = nullptr;
  for (const Decision& d : run.report.decisions) {
    if (d.kind == DecisionKind::grow && !first_grow) first_grow = &d;
    EXPECT_FALSE(d.kind == DecisionKind::grow && d.stage == "light") << d.why;
  }
  ASSERT_NE(first_grow, nullptr) << table.str();
  EXPECT_EQ(first_grow->stage, "heavy") << first_grow->why;
  EXPECT_TRUE(contains(first_grow->why, "heavy is")) << first_grow->why;
  EXPECT_GT(first_grow->at.count(), 0);
}

// In a graph: two branches of a fan-out, joined again; the heavy branch limits the graph, and the
// scheduler gives its stage the threads.
TEST(PipelineAutotune, MovesThreadsToTheBranchThatLimitsTheGraph) {
  Pipeline pipe({.max_in_flight = 64, .autotune = AutotuneOptions{.interval = std::chrono::milliseconds(50)}});
  auto [a, b] = pipe.source("numbers", [i = std::uint64_t{0}]() mutable -> std::optional<std::uint64_t> { return i++; })
                    .fan_out("split");
  auto light = std::move(a).map("light", [](std::uint64_t x) { return work(x, light_rounds); },
                                {.concurrency = parallel(1, 4, 1)});
  auto heavy = std::move(b).map("heavy", [](std::uint64_t x) { return work(x, heavy_rounds); },
                                {.concurrency = parallel(1, 4, 1)});
  std::atomic<std::uint64_t> sum{0};
  join("pair", std::move(light), std::move(heavy))
      .sink("sum", [&](std::tuple<std::uint64_t, std::uint64_t> p) { sum.fetch_add(std::get<0>(p) & 1); });
  RunReport report;
  {
    StopAfter stop(pipe, std::chrono::seconds(3));
    report = pipe.run();
  }
  std::ostringstream table;
  print(table, report);
  EXPECT_GT(stage_named(report.stages, "heavy").concurrency, 1) << table.str();
  EXPECT_EQ(stage_named(report.stages, "light").concurrency, 1) << table.str();
  for (const Decision& d : report.decisions)
    EXPECT_FALSE(d.kind == DecisionKind::grow && d.stage == "light") << d.why;
}

TEST(PipelineAutotune, LogsEveryDecisionAndDrawsItInTheTrace) {
  const TempPath trace("autotune_trace");
  const TunedRun run = run_light_heavy(AutotuneOptions{.interval = std::chrono::milliseconds(50)}, trace.path());
  ASSERT_FALSE(run.report.decisions.empty());
  ASSERT_EQ(run.logged.size(), run.report.decisions.size()) << "on_decision sees each move the report lists";
  for (std::size_t i = 0; i < run.logged.size(); ++i) {
    EXPECT_EQ(run.logged[i].stage, run.report.decisions[i].stage);
    EXPECT_EQ(run.logged[i].to, run.report.decisions[i].to);
  }
  std::ostringstream printed;
  print(printed, run.report);
  EXPECT_TRUE(contains(printed.str(), "scheduler: ")) << printed.str();
  EXPECT_TRUE(contains(printed.str(), run.report.decisions.front().why)) << printed.str();

  const std::string json = read_text(trace.path());
  EXPECT_TRUE(contains(json, R"("cat":"scheduler","ph":"i")")) << "each move is an instant event";
  EXPECT_TRUE(contains(json, R"("name":"heavy calls","cat":"scheduler","ph":"C")")) << "each setting a counter";
  EXPECT_TRUE(contains(json, R"("name":"in-flight limit")"));
  EXPECT_TRUE(contains(json, run.report.decisions.front().why.substr(0, 20)));
}

TEST(PipelineAutotune, WithoutItTheStaticSettingsStay) {
  const TunedRun run = run_light_heavy(std::nullopt);
  EXPECT_TRUE(run.report.decisions.empty());
  EXPECT_EQ(stage_named(run.report.stages, "light").concurrency, 1);
  EXPECT_EQ(stage_named(run.report.stages, "heavy").concurrency, 1);
  EXPECT_EQ(run.report.max_in_flight, 64u);
}

TEST(PipelineAutotune, AnUnknownTargetNamesTheStages) {
  Pipeline pipe({.autotune = AutotuneOptions{.target = "compute"}});
  pipe.source("numbers", [i = 0]() mutable -> std::optional<int> { return i < 10 ? std::optional(i++) : std::nullopt; })
      .sink("sum", [](int) {});
  try {
    pipe.run();
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_TRUE(contains(e.what(), "'compute'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "numbers, sum")) << e.what();
  }
}

}  // namespace
}  // namespace stoke::graph::test
