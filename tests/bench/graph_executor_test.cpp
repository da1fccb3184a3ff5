// measure_graph_executor: both executors did the same work (their sinks' checksums agree with the
// sum the stages must give), each was timed `repeat` times, and bad options are refused.
#include "stoke/bench/graph_executor.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace stoke::bench {
namespace {

// Item i leaves the last of `stages` stages as i + stages.
std::uint64_t expected_checksum(std::uint64_t items, int stages) {
  return items * (items - 1) / 2 + items * static_cast<std::uint64_t>(stages);
}

TEST(GraphExecutorBench, ChecksumsOfBothExecutorsAgreeWithTheStagesSum) {
  for (const bool ordered : {false, true}) {
    const GraphExecutorOptions options{
        .items = 3000, .stages = 2, .threads = 2, .in_flight = 16, .repeat = 2, .ordered = ordered};
    EXPECT_EQ(run_stoke_graph(options).checksum, expected_checksum(3000, 2));
    EXPECT_EQ(run_tbb_pipeline(options).checksum, expected_checksum(3000, 2));
    int progress_calls = 0;
    const GraphExecutorResult r = measure_graph_executor(options, [&](int run, int runs) {
      EXPECT_EQ(run, ++progress_calls);
      EXPECT_EQ(runs, 2);
    });
    EXPECT_EQ(r.checksum, expected_checksum(3000, 2));
    EXPECT_EQ(r.threads, 2);
    EXPECT_EQ(progress_calls, 2);
    EXPECT_EQ(r.stoke_seconds.size(), 2u);
    EXPECT_EQ(r.tbb_seconds.size(), 2u);
    EXPECT_GT(r.ratio, 0.0);
    EXPECT_DOUBLE_EQ(r.ratio, r.stoke_ns_per_item_stage / r.tbb_ns_per_item_stage);
  }
}

TEST(GraphExecutorBench, RefusesEmptyRuns) {
  EXPECT_THROW(measure_graph_executor({.items = 0}), std::invalid_argument);
  EXPECT_THROW(measure_graph_executor({.stages = 0}), std::invalid_argument);
  EXPECT_THROW(measure_graph_executor({.repeat = 0}), std::invalid_argument);
}

}  // namespace
}  // namespace stoke::bench
