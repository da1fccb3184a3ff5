// A long run through every kind of stage, with every item accounted for.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "stoke/graph/graph.hpp"
#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

TEST(PipelineStressTest, HundredThousandItemsThroughMapFilterAndEmitAreAllAccountedFor) {
  constexpr std::uint64_t kItems = 100'000;
  LiveCounter live;
  std::uint64_t sum = 0;
  std::uint64_t sink_calls = 0;
  RunReport report;
  {
    Pipeline pipe({.max_in_flight = 128});
    pipe.source("source",
                [&live, next = std::uint64_t{0}]() mutable -> std::optional<Tracked> {
                  if (next == kItems) return std::nullopt;
                  return Tracked(live, next++);
                })
        .map("double",
             [](Tracked t) {
               t.set_value(t.value() * 2);
               return t;
             },
             {.concurrency = parallel(4)})
        .filter("drop_thirds",
                [](Tracked t) -> std::optional<Tracked> {
                  if ((t.value() / 2) % 3 == 0) return std::nullopt;
                  return t;
                },
                {.concurrency = parallel(2)})
        .emit<Tracked>("split",
                       [&live](Tracked t, Emitter<Tracked>& out) {
                         const std::uint64_t value = t.value();
                         out.emit(std::move(t));
                         out.emit(Tracked(live, value + 1));
                       },
                       {.concurrency = parallel(4)})
        .sink("sum", [&](Tracked t) {
          sum += t.value();
          ++sink_calls;
        });
    report = pipe.run();

    const auto stats = pipe.stats();
    std::uint64_t kept = 0;
    for (std::uint64_t i = 0; i < kItems; ++i) kept += (i % 3 != 0) ? 1 : 0;

    EXPECT_EQ(stage_named(stats, "source").items_out, kItems);
    EXPECT_EQ(stage_named(stats, "double").items_in, kItems);
    EXPECT_EQ(stage_named(stats, "double").items_out, kItems);
    EXPECT_EQ(stage_named(stats, "drop_thirds").items_in, kItems);
    EXPECT_EQ(stage_named(stats, "drop_thirds").dropped, kItems - kept);
    EXPECT_EQ(stage_named(stats, "drop_thirds").items_out, kept);
    EXPECT_EQ(stage_named(stats, "split").items_in, kept);
    EXPECT_EQ(stage_named(stats, "split").items_out, 2 * kept);
    EXPECT_EQ(stage_named(stats, "sum").items_in, 2 * kept);
    EXPECT_EQ(stage_named(stats, "sum").items_out, 2 * kept);
    for (const StageStats& stage : stats) {
      EXPECT_EQ(stage.queued, 0u) << stage.name;
      EXPECT_EQ(stage.active, 0) << stage.name;
    }
    EXPECT_EQ(report.produced, kItems);
    EXPECT_EQ(report.consumed, 2 * kept);
    EXPECT_EQ(sink_calls, 2 * kept);
  }

  // Each kept i contributes 2i (the moved input) and 2i + 1 (the new output).
  std::uint64_t expected_sum = 0;
  for (std::uint64_t i = 0; i < kItems; ++i) {
    if (i % 3 != 0) expected_sum += 4 * i + 1;
  }
  EXPECT_EQ(sum, expected_sum);
  EXPECT_EQ(live.live(), 0);
  EXPECT_FALSE(report.stopped);
  EXPECT_FALSE(report.cancelled);
}

}  // namespace
}  // namespace stoke::graph::test
