// run_timed: a pipeline run to its end, or stopped at its time limit after a last tick; median.
#include "stoke/bench/timing.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

namespace stoke::bench {
namespace {

TEST(Median, OfOddAndEvenCountsAndOfNone) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median({}), 0);
}

// source (endless when `items` is 0) -> sink counting the items.
struct Counting {
  graph::Pipeline pipe{{.max_in_flight = 8}};
  std::atomic<std::uint64_t> items{0};
  explicit Counting(std::uint64_t limit) {
    pipe.source("count",
                [i = std::uint64_t{0}, limit]() mutable -> std::optional<std::uint64_t> {
                  return limit == 0 || i < limit ? std::optional(i++) : std::nullopt;
                })
        .sink("sink", [this](std::uint64_t) { items.fetch_add(1); });
  }
};

TEST(RunTimed, RunsAFiniteStreamToItsEnd) {
  Counting run(100);
  const TimedRun timed = run_timed(run.pipe, 0, std::chrono::milliseconds(10));
  EXPECT_FALSE(timed.report.stopped);
  EXPECT_EQ(timed.report.consumed, 100u);
  EXPECT_EQ(run.items.load(), 100u);
  EXPECT_GE(timed.seconds, 0.0);
}

TEST(RunTimed, StopsAnEndlessStreamAtTheLimitAfterALastTick) {
  Counting run(0);
  std::vector<double> ticks;  // written by the side thread only, read after run_timed returns
  const TimedRun timed = run_timed(run.pipe, 0.3, std::chrono::milliseconds(50), [&](double t) { ticks.push_back(t); });
  EXPECT_TRUE(timed.report.stopped);
  EXPECT_EQ(timed.report.consumed, run.items.load());
  EXPECT_GT(run.items.load(), 0u);
  ASSERT_FALSE(ticks.empty());
  EXPECT_GE(ticks.back(), 0.3);  // the tick at the limit, before the stop
  EXPECT_TRUE(std::is_sorted(ticks.begin(), ticks.end()));
  EXPECT_GE(timed.seconds, ticks.back());
}

}  // namespace
}  // namespace stoke::bench
