// The stall watchdog (PipelineOptions::stall): a body call that runs past the limit is reported
// once, with its stage, item and name, under OnStall::warn the run goes on; under OnStall::fail
// the run fails with a StallError once the call returns, and a call that never returns ends the
// process with stall_exit_status.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stoke/graph/graph.hpp"

namespace stoke::graph::test {
namespace {

using namespace std::chrono_literals;

constexpr int kItems = 40;

auto count_to(int n) {
  return [i = 0, n]() mutable -> std::optional<int> { return i < n ? std::optional(i++) : std::nullopt; };
}

/// Stalls reported through StallOptions::on_stall, as they came.
struct Logged {
  std::mutex mutex;
  std::vector<Stall> stalls;
  void add(const Stall& stall) {
    std::lock_guard lock(mutex);
    stalls.push_back(stall);
  }
};

PipelineOptions watched(std::chrono::milliseconds limit, OnStall policy, Logged& log) {
  PipelineOptions options;
  options.threads = 2;
  options.stall.limit = limit;
  options.stall.policy = policy;
  options.stall.item_name = [](std::uint64_t index) { return "file-" + std::to_string(index) + ".jpg"; };
  options.stall.on_stall = [&log](const Stall& stall) { log.add(stall); };
  return options;
}

TEST(PipelineStallTest, ACallPastTheLimitIsReportedOnceWithItsStageItemAndName) {
  Logged log;
  Pipeline pipe(watched(40ms, OnStall::warn, log));
  std::atomic<int> consumed{0};
  pipe.source("source", count_to(kItems))
      .map("decode",
           [](int i) {
             if (i == 7) std::this_thread::sleep_for(400ms);
             return i;
           },
           {.concurrency = parallel(2)})
      .sink("sink", [&](int) { consumed.fetch_add(1); });
  const RunReport report = pipe.run();

  EXPECT_EQ(consumed.load(), kItems);  // a warning: the run goes on
  ASSERT_EQ(report.stalls.size(), 1u);
  const Stall& stall = report.stalls.front();
  EXPECT_EQ(stall.stage, "decode");
  EXPECT_EQ(stall.index, 7u);
  EXPECT_EQ(stall.item, "file-7.jpg");
  EXPECT_TRUE(stall.returned);
  // Seen for at least the limit; by the end for about the call's 400 ms (the watchdog looks every 10 ms).
  EXPECT_GE(stall.running, 300ms);
  ASSERT_EQ(log.stalls.size(), 1u);  // logged once, as it was found
  EXPECT_EQ(log.stalls.front().index, 7u);
  EXPECT_FALSE(log.stalls.front().returned);
  EXPECT_GE(log.stalls.front().running, 40ms);
  EXPECT_LT(log.stalls.front().running, 400ms);

  std::ostringstream table;
  print(table, report);
  EXPECT_NE(table.str().find("stalled: stage 'decode' was on item 7 (file-7.jpg) for"), std::string::npos)
      << table.str();
}

TEST(PipelineStallTest, CallsUnderTheLimitAreNotReported) {
  Logged log;
  Pipeline pipe(watched(300ms, OnStall::warn, log));
  pipe.source("source", count_to(kItems))
      .map("decode",
           [](int i) {
             std::this_thread::sleep_for(2ms);
             return i;
           })
      .sink("sink", [](int) {});
  const RunReport report = pipe.run();
  EXPECT_TRUE(report.stalls.empty());
  EXPECT_TRUE(log.stalls.empty());
}

TEST(PipelineStallTest, ASourceStuckProducingAnItemNamesThatItem) {
  Logged log;
  Pipeline pipe(watched(40ms, OnStall::warn, log));
  pipe.source("read",
              [i = 0]() mutable -> std::optional<int> {
                if (i == 5) std::this_thread::sleep_for(300ms);
                return i < 10 ? std::optional(i++) : std::nullopt;
              })
      .sink("sink", [](int) {});
  const RunReport report = pipe.run();
  ASSERT_EQ(report.stalls.size(), 1u);
  EXPECT_EQ(report.stalls.front().stage, "read");
  EXPECT_EQ(report.stalls.front().index, 5u);
}

TEST(PipelineStallTest, ASinkAndAnEmitStageAreWatchedToo) {
  Logged log;
  Pipeline pipe(watched(40ms, OnStall::warn, log));
  pipe.source("source", count_to(kItems))
      .emit<int>("pairs",
                 [](int i, Emitter<int>& out) {
                   if (i == 3) std::this_thread::sleep_for(250ms);
                   out.emit(i);
                 })
      .sink("train", [](int i) {
        if (i == 30) std::this_thread::sleep_for(250ms);
      });
  const RunReport report = pipe.run();
  ASSERT_EQ(report.stalls.size(), 2u);
  EXPECT_EQ(report.stalls[0].stage, "pairs");
  EXPECT_EQ(report.stalls[0].index, 3u);
  EXPECT_EQ(report.stalls[1].stage, "train");
  EXPECT_EQ(report.stalls[1].index, 30u);
}

TEST(PipelineStallTest, FailPolicyFailsTheRunWithAStallErrorOnceTheCallReturns) {
  Logged log;
  PipelineOptions options = watched(40ms, OnStall::fail, log);
  options.stall.grace = 20s;  // the call returns after 300 ms: the process goes on
  Pipeline pipe(options);
  std::atomic<int> consumed{0};
  pipe.source("source", count_to(kItems))
      .map("decode",
           [](int i) {
             if (i == 2) std::this_thread::sleep_for(300ms);
             return i;
           })
      .sink("sink", [&](int) { consumed.fetch_add(1); });
  try {
    pipe.run();
    FAIL() << "run() returned";
  } catch (const StageError& e) {
    EXPECT_EQ(e.stage(), "decode");
    EXPECT_EQ(e.index(), 2u);
    EXPECT_NE(std::string(e.what()).find("past the stall limit of 0.04 s (item 'file-2.jpg')"), std::string::npos)
        << e.what();
    try {
      std::rethrow_exception(e.cause());
    } catch (const StallError& cause) {
      EXPECT_EQ(cause.stage(), "decode");
      EXPECT_EQ(cause.index(), 2u);
      EXPECT_EQ(cause.item(), "file-2.jpg");
    }
  }
  EXPECT_LT(consumed.load(), kItems);  // cancelled
  EXPECT_EQ(log.stalls.size(), 1u);
}

TEST(PipelineStallTest, WithoutALimitNothingIsWatched) {
  PipelineOptions options;
  options.stall.item_name = [](std::uint64_t) -> std::string { throw std::logic_error("not called"); };
  Pipeline pipe(options);
  pipe.source("source", count_to(3))
      .map("slow",
           [](int i) {
             std::this_thread::sleep_for(20ms);
             return i;
           })
      .sink("sink", [](int) {});
  EXPECT_TRUE(pipe.run().stalls.empty());
}

TEST(PipelineStallDeathTest, ACallThatNeverReturnsUnderFailEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        PipelineOptions options;
        options.stall.limit = 50ms;
        options.stall.policy = OnStall::fail;
        options.stall.item_name = [](std::uint64_t index) { return "file-" + std::to_string(index) + ".jpg"; };
        Pipeline pipe(options);
        pipe.source("source", count_to(kItems))
            .map("plugin",
                 [](int i) {
                   if (i == 4) std::this_thread::sleep_for(1h);  // a hung read, a plugin that never returns
                   return i;
                 })
            .sink("sink", [](int) {});
        pipe.run();
      },
      ::testing::ExitedWithCode(stall_exit_status),
      "did not return after the run was cancelled.*\n.*stage 'plugin' has been on item 4 \\(file-4.jpg\\)");
}

}  // namespace
}  // namespace stoke::graph::test
