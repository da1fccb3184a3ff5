// Ordered stages deliver items in source order, whatever the thread count and per-item work.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stoke/graph/graph.hpp"
#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

constexpr std::uint64_t kItems = 600;

/// Uneven work, so that parallel calls finish out of order.
void uneven_work(std::uint64_t value) {
  if (value % 7 == 0) {
    sleep_us(300);
  } else if (value % 3 == 0) {
    sleep_us(40);
  }
}

/// Counts 0, 1, ..., count - 1.
auto counting_source(std::uint64_t count) {
  return [count, next = std::uint64_t{0}]() mutable -> std::optional<std::uint64_t> {
    if (next == count) return std::nullopt;
    return next++;
  };
}

class PipelineOrderingTest : public ::testing::TestWithParam<int> {
 protected:
  PipelineOptions options() const { return {.max_in_flight = 64, .threads = GetParam()}; }
};

TEST_P(PipelineOrderingTest, ParallelOrderedMapsAndFilterDeliverSourceOrderToOrderedSink) {
  std::vector<std::uint64_t> seen;
  Pipeline pipe(options());
  pipe.source("source", counting_source(kItems))
      .map("first",
           [](std::uint64_t x) {
             uneven_work(x);
             return x * 10;
           },
           {.concurrency = parallel(4), .ordered = true})
      .filter("drop",
              [](std::uint64_t x) -> std::optional<std::uint64_t> {
                uneven_work(x / 10 + 1);
                if ((x / 10) % 5 == 3) return std::nullopt;
                return x;
              },
              {.concurrency = parallel(3), .ordered = true})
      .map("second",
           [](std::uint64_t x) {
             uneven_work(x / 10 + 2);
             return x / 10;
           },
           {.concurrency = parallel(4), .ordered = true})
      .sink("collect", [&](std::uint64_t x) { seen.push_back(x); }, {.ordered = true});

  const RunReport report = pipe.run();

  std::vector<std::uint64_t> expected;
  for (std::uint64_t i = 0; i < kItems; ++i) {
    if (i % 5 != 3) expected.push_back(i);
  }
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(report.produced, kItems);
  EXPECT_EQ(report.consumed, expected.size());
}

TEST_P(PipelineOrderingTest, UnorderedParallelStagesFeedingOrderedSinkDeliverSourceOrder) {
  std::vector<std::uint64_t> seen;
  Pipeline pipe(options());
  pipe.source("source", counting_source(kItems))
      .map("work",
           [](std::uint64_t x) {
             uneven_work(x);
             return x;
           },
           {.concurrency = parallel(4)})
      .filter("drop",
              [](std::uint64_t x) -> std::optional<std::uint64_t> {
                uneven_work(x + 1);
                if (x % 4 == 1) return std::nullopt;
                return x;
              },
              {.concurrency = parallel(4)})
      .sink("collect", [&](std::uint64_t x) { seen.push_back(x); }, {.ordered = true});

  pipe.run();

  std::vector<std::uint64_t> expected;
  for (std::uint64_t i = 0; i < kItems; ++i) {
    if (i % 4 != 1) expected.push_back(i);
  }
  EXPECT_EQ(seen, expected);
}

TEST_P(PipelineOrderingTest, SkippedItemsDoNotBreakSourceOrder) {
  std::vector<std::uint64_t> seen;
  Pipeline pipe(options());
  pipe.source("source", counting_source(kItems))
      .map("flaky",
           [](std::uint64_t x) {
             uneven_work(x);
             if (x % 11 == 5) throw InjectedFailure("bad item " + std::to_string(x));
             return x;
           },
           {.concurrency = parallel(4), .ordered = true, .on_error = OnError::skip})
      .filter("drop",
              [](std::uint64_t x) -> std::optional<std::uint64_t> {
                if (x % 5 == 3) return std::nullopt;
                return x;
              },
              {.concurrency = parallel(2), .ordered = true})
      .sink("collect", [&](std::uint64_t x) { seen.push_back(x); }, {.ordered = true});

  const RunReport report = pipe.run();

  std::vector<std::uint64_t> expected;
  std::uint64_t skipped = 0;
  for (std::uint64_t i = 0; i < kItems; ++i) {
    if (i % 11 == 5) {
      ++skipped;
    } else if (i % 5 != 3) {
      expected.push_back(i);
    }
  }
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(report.skipped, skipped);
}

/// Collects inputs into batches of `size`; the last, partial batch comes from flush().
struct Batcher {
  std::size_t size = 4;
  std::vector<std::uint64_t> pending;
  std::vector<std::uint64_t>* inputs_seen = nullptr;

  void operator()(std::uint64_t x, Emitter<std::vector<std::uint64_t>>& out) {
    inputs_seen->push_back(x);
    pending.push_back(x);
    if (pending.size() == size) out.emit(std::exchange(pending, {}));
  }
  void flush(Emitter<std::vector<std::uint64_t>>& out) {
    if (!pending.empty()) out.emit(std::exchange(pending, {}));
  }
};

TEST_P(PipelineOrderingTest, SerialOrderedEmitProcessesInSourceOrderAndBatchesConsecutiveItems) {
  constexpr std::uint64_t kCount = 1003;  // 250 full batches and a partial one of 3
  std::vector<std::uint64_t> inputs_seen;
  std::vector<std::vector<std::uint64_t>> batches;
  Pipeline pipe(options());
  pipe.source("source", counting_source(kCount))
      .map("work",
           [](std::uint64_t x) {
             uneven_work(x);
             return x;
           },
           {.concurrency = parallel(4)})
      .emit<std::vector<std::uint64_t>>("batch", Batcher{.size = 4, .pending = {}, .inputs_seen = &inputs_seen},
                                        {.ordered = true})
      .sink("collect", [&](std::vector<std::uint64_t> batch) { batches.push_back(std::move(batch)); },
            {.ordered = true});

  pipe.run();

  std::vector<std::uint64_t> all(kCount);
  for (std::uint64_t i = 0; i < kCount; ++i) all[i] = i;
  EXPECT_EQ(inputs_seen, all);

  ASSERT_EQ(batches.size(), 251u);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    std::vector<std::uint64_t> expected;
    for (std::uint64_t i = b * 4; i < std::min<std::uint64_t>(b * 4 + 4, kCount); ++i) expected.push_back(i);
    EXPECT_EQ(batches[b], expected) << "batch " << b;
  }
}

TEST_P(PipelineOrderingTest, OrderedEmitOneToTwoFollowedByOrderedSinkKeepsSourceOrder) {
  // Serial + ordered emit: its outputs follow the source order of its inputs.
  std::vector<std::uint64_t> seen;
  Pipeline pipe(options());
  pipe.source("source", counting_source(kItems))
      .map("work",
           [](std::uint64_t x) {
             uneven_work(x);
             return x;
           },
           {.concurrency = parallel(4), .ordered = true})
      .emit<std::uint64_t>("split",
                           [](std::uint64_t x, Emitter<std::uint64_t>& out) {
                             if (x % 6 == 2) return;  // emits nothing for some inputs
                             out.emit(2 * x);
                             out.emit(2 * x + 1);
                           },
                           {.ordered = true})
      .map("after",
           [](std::uint64_t x) {
             uneven_work(x);
             return x;
           },
           {.concurrency = parallel(3), .ordered = true})
      .sink("collect", [&](std::uint64_t x) { seen.push_back(x); }, {.ordered = true});

  pipe.run();

  std::vector<std::uint64_t> expected;
  for (std::uint64_t i = 0; i < kItems; ++i) {
    if (i % 6 == 2) continue;
    expected.push_back(2 * i);
    expected.push_back(2 * i + 1);
  }
  EXPECT_EQ(seen, expected);
}

INSTANTIATE_TEST_SUITE_P(Threads, PipelineOrderingTest, ::testing::Values(1, 2, 8),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return "threads_" + std::to_string(param.param);
                         });

}  // namespace
}  // namespace stoke::graph::test
