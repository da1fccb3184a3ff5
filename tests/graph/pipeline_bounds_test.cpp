// Memory bounds: the end-to-end in-flight limit and the per-stage input buffer bound.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include "stoke/graph/graph.hpp"
#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

/// Produces Tracked items 0, 1, ..., count - 1 (count 0: never ends).
auto tracked_source(LiveCounter& live, std::uint64_t count) {
  return [&live, count, next = std::uint64_t{0}]() mutable -> std::optional<Tracked> {
    if (count != 0 && next == count) return std::nullopt;
    return Tracked(live, next++);
  };
}

class MaxInFlightTest : public ::testing::TestWithParam<std::size_t> {};

TEST_P(MaxInFlightTest, LiveItemsNeverExceedMaxInFlightAndReachItWithSlowSink) {
  const std::size_t limit = GetParam();
  constexpr std::uint64_t kItems = 300;
  LiveCounter live;
  std::atomic<std::uint64_t> consumed{0};
  {
    Pipeline pipe({.max_in_flight = limit, .threads = 8});
    pipe.source("source", tracked_source(live, kItems))
        .map("work",
             [](Tracked t) {
               sleep_us(20);
               t.set_value(t.value() + 1);
               return t;
             },
             {.concurrency = parallel(4)})
        .filter("drop",
                [](Tracked t) -> std::optional<Tracked> {
                  if (t.value() % 10 == 0) return std::nullopt;
                  return t;
                },
                {.concurrency = parallel(2)})
        .sink("slow", [&](Tracked t) {
          sleep_us(300);
          consumed += t.owns() ? 1 : 0;
        });

    const RunReport report = pipe.run();
    EXPECT_EQ(report.produced, kItems);
    EXPECT_EQ(report.consumed, kItems - kItems / 10);
  }
  EXPECT_EQ(consumed.load(), kItems - kItems / 10);
  EXPECT_LE(live.peak(), static_cast<long>(limit));
  EXPECT_EQ(live.peak(), static_cast<long>(limit)) << "the slow sink should let the pipeline fill up to the limit";
  EXPECT_EQ(live.live(), 0);
}

INSTANTIATE_TEST_SUITE_P(Limits, MaxInFlightTest, ::testing::Values(std::size_t{1}, std::size_t{3}, std::size_t{8}),
                         [](const ::testing::TestParamInfo<std::size_t>& param) {
                           return "max_in_flight_" + std::to_string(param.param);
                         });

// Pipeline shared by the capacity tests: source -> map (parallel 2, capacity 2) -> slow serial
// sink (capacity 3), with an in-flight limit far above what the buffers allow.
struct SmallBuffers {
  static constexpr std::size_t kMapCapacity = 2;
  static constexpr std::size_t kSinkCapacity = 3;
  static constexpr int kMapConcurrency = 2;
  static constexpr std::uint64_t kItems = 200;

  LiveCounter live;
  Pipeline pipe{{.max_in_flight = 1000, .threads = 4}};

  SmallBuffers() {
    pipe.source("source", tracked_source(live, kItems))
        .map("work", [](Tracked t) { return t; }, {.concurrency = parallel(kMapConcurrency), .capacity = kMapCapacity})
        .sink("slow", [](Tracked) { sleep_us(500); }, {.capacity = kSinkCapacity});
  }
};

TEST(PipelineCapacityTest, SmallCapacityBoundsPeakQueuedOfEachStage) {
  SmallBuffers fixture;
  const RunReport report = fixture.pipe.run();
  ASSERT_EQ(report.consumed, SmallBuffers::kItems);

  const StageStats& map = stage_named(report.stages, "work");
  const StageStats& sink = stage_named(report.stages, "slow");
  EXPECT_EQ(map.capacity, SmallBuffers::kMapCapacity);
  EXPECT_EQ(sink.capacity, SmallBuffers::kSinkCapacity);
  // A buffer may overshoot its capacity by the upstream stage's concurrency (source: 1).
  EXPECT_LE(map.peak_queued, SmallBuffers::kMapCapacity + 1);
  EXPECT_LE(sink.peak_queued, SmallBuffers::kSinkCapacity + SmallBuffers::kMapConcurrency);
  EXPECT_GE(sink.peak_queued, 1u) << "the slow sink's buffer should have been used";
}

TEST(PipelineCapacityTest, FullBuffersHoldLiveItemsFarBelowMaxInFlight) {
  SmallBuffers fixture;
  fixture.pipe.run();
  // Items can only be: in the source's hands (1), in the map's buffer (capacity + source
  // overshoot 1), in the map's calls (2), in the sink's buffer (capacity + map overshoot 2) or in
  // the sink's call (1).
  constexpr long kBound = 1 + (SmallBuffers::kMapCapacity + 1) + SmallBuffers::kMapConcurrency +
                          (SmallBuffers::kSinkCapacity + SmallBuffers::kMapConcurrency) + 1;
  EXPECT_LE(fixture.live.peak(), kBound);
  EXPECT_EQ(fixture.live.live(), 0);
}

TEST(PipelineCapacityTest, DefaultCapacityIsTwiceMaxConcurrencyPlusTwo) {
  Pipeline pipe;
  pipe.source("source", [] { return std::optional<int>(); })
      .map("wide", [](int x) { return x; }, {.concurrency = parallel(5)})
      .sink("narrow", [](int) {});
  const auto stats = pipe.stats();
  EXPECT_EQ(stage_named(stats, "wide").capacity, 12u);
  EXPECT_EQ(stage_named(stats, "narrow").capacity, 4u);
}

TEST(PipelineMaxInFlightTest, LoweringMaxInFlightWhileRunningBoundsLiveItemsOnceDrained) {
  constexpr std::size_t kInitial = 16;
  constexpr std::size_t kLowered = 3;
  LiveCounter live;
  std::atomic<std::uint64_t> consumed{0};
  std::atomic<bool> finished{false};
  Pipeline pipe({.max_in_flight = kInitial, .threads = 4});
  pipe.source("source", tracked_source(live, 0))
      .map("work", [](Tracked t) { return t; }, {.concurrency = parallel(2)})
      .sink("slow", [&](Tracked) {
        sleep_us(200);
        ++consumed;
      });

  bool drained = false;
  bool ran_after_lowering = false;
  std::thread controller([&] {
    wait_until([&] { return consumed.load() >= 30 || finished.load(); });
    pipe.set_max_in_flight(kLowered);
    // Items from before the change may still be alive; once they are down to the new limit, the
    // source may never take them above it again.
    drained = wait_until([&] { return live.live() <= static_cast<long>(kLowered) || finished.load(); });
    live.start_watch();
    const std::uint64_t at_watch = consumed.load();
    ran_after_lowering = wait_until([&] { return consumed.load() >= at_watch + 60 || finished.load(); });
    pipe.stop();
  });
  const RunReport report = pipe.run();
  finished = true;
  controller.join();

  EXPECT_TRUE(drained);
  EXPECT_TRUE(ran_after_lowering);
  EXPECT_TRUE(report.stopped);
  EXPECT_EQ(pipe.max_in_flight(), kLowered);
  EXPECT_LE(live.watched_peak(), static_cast<long>(kLowered));
  EXPECT_EQ(live.watched_peak(), static_cast<long>(kLowered)) << "the slow sink should let the pipeline refill";
  EXPECT_EQ(live.live(), 0);
}

}  // namespace
}  // namespace stoke::graph::test
