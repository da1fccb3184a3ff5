// Errors: OnError::fail turns a throw in any stage into a StageError from run(), with nothing
// left alive; OnError::skip drops, counts and lists the item and goes on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoke/graph/graph.hpp"
#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

constexpr std::uint64_t kItems = 200;
constexpr std::uint64_t kFailAt = 37;

enum class Where { source, map, filter, emit, flush, sink };

/// What the test case is called: the stage kind that throws, or "flush".
const char* param_name(Where where) {
  switch (where) {
    case Where::source:
      return "source";
    case Where::map:
      return "map";
    case Where::filter:
      return "filter";
    case Where::emit:
      return "emit";
    case Where::flush:
      return "flush";
    case Where::sink:
      return "sink";
  }
  return "unknown";
}

/// The stage that throws: a failing flush belongs to the emit stage.
const char* stage_name(Where where) { return where == Where::flush ? "emit" : param_name(where); }

void PrintTo(Where where, std::ostream* out) { *out << param_name(where); }

std::string failure_message(Where where) { return std::string("injected failure in ") + param_name(where); }

/// Passes items through one to one; its flush adds one extra item (or throws).
struct PassThroughEmit {
  Where fail;
  LiveCounter* live;

  void operator()(Tracked t, Emitter<Tracked>& out) {
    if (fail == Where::emit && t.value() == kFailAt) throw InjectedFailure(failure_message(fail));
    out.emit(std::move(t));
  }
  void flush(Emitter<Tracked>& out) {
    if (fail == Where::flush) throw InjectedFailure(failure_message(fail));
    out.emit(Tracked(*live, 1'000'000));
  }
};

class StageFailureTest : public ::testing::TestWithParam<Where> {};

TEST_P(StageFailureTest, ThrowInStageMakesRunThrowStageErrorNamingStageAndItemWithNothingLeftAlive) {
  const Where fail = GetParam();
  LiveCounter live;
  std::optional<StageError> caught;
  {
    // Small buffers and a slow sink, so that the failure hits a pipeline full of blocked items.
    Pipeline pipe({.max_in_flight = 16, .threads = 4});
    pipe.source("source",
                [&live, fail, next = std::uint64_t{0}]() mutable -> std::optional<Tracked> {
                  if (next == kItems) return std::nullopt;
                  if (fail == Where::source && next == kFailAt) throw InjectedFailure(failure_message(fail));
                  return Tracked(live, next++);
                })
        .map("map",
             [fail](Tracked t) {
               sleep_us(20);
               if (fail == Where::map && t.value() == kFailAt) throw InjectedFailure(failure_message(fail));
               return t;
             },
             {.concurrency = parallel(3), .capacity = 2})
        .filter("filter",
                [fail](Tracked t) -> std::optional<Tracked> {
                  if (fail == Where::filter && t.value() == kFailAt) throw InjectedFailure(failure_message(fail));
                  if (t.value() % 10 == 9) return std::nullopt;
                  return t;
                },
                {.concurrency = parallel(2), .capacity = 2})
        .emit<Tracked>("emit", PassThroughEmit{fail, &live}, {.capacity = 2})
        .sink("sink",
              [fail](Tracked t) {
                sleep_us(50);
                if (fail == Where::sink && t.value() == kFailAt) throw InjectedFailure(failure_message(fail));
              },
              {.capacity = 2});

    try {
      pipe.run();
    } catch (const StageError& error) {
      caught = error;
    }
    EXPECT_EQ(live.live(), 0) << "every item must be destroyed by the time run() returns";
  }
  ASSERT_TRUE(caught.has_value()) << "run() did not throw StageError";
  EXPECT_EQ(caught->stage(), stage_name(fail));
  const std::uint64_t expected_index = fail == Where::flush ? no_index : kFailAt;
  EXPECT_EQ(caught->index(), expected_index);
  EXPECT_TRUE(contains(caught->what(), std::string("'") + stage_name(fail) + "'"));
  EXPECT_TRUE(contains(caught->what(), failure_message(fail)));
  if (fail != Where::flush) {
    EXPECT_EQ(std::string(caught->what()),
              std::string("stage '") + stage_name(fail) + "' failed on item 37: " + failure_message(fail));
  }

  ASSERT_TRUE(caught->cause() != nullptr);
  try {
    std::rethrow_exception(caught->cause());
  } catch (const InjectedFailure& original) {
    EXPECT_EQ(std::string(original.what()), failure_message(fail));
  } catch (...) {
    ADD_FAILURE() << "cause() does not hold the original InjectedFailure";
  }
}

INSTANTIATE_TEST_SUITE_P(EachStageKind, StageFailureTest,
                         ::testing::Values(Where::source, Where::map, Where::filter, Where::emit, Where::flush,
                                           Where::sink),
                         [](const ::testing::TestParamInfo<Where>& param) { return param_name(param.param); });

TEST(PipelineErrorTest, FailureUpstreamOfOrderedSinkDestroysItemsHeldForReordering) {
  LiveCounter live;
  bool threw = false;
  {
    Pipeline pipe({.max_in_flight = 32, .threads = 4});
    pipe.source("source",
                [&live, next = std::uint64_t{0}]() mutable -> std::optional<Tracked> {
                  if (next == kItems) return std::nullopt;
                  return Tracked(live, next++);
                })
        .map("map",
             [](Tracked t) {
               if (t.value() == kFailAt) {
                 sleep_us(2000);  // later items overtake it and wait in the sink's reorder buffer
                 throw InjectedFailure("late failure");
               }
               return t;
             },
             {.concurrency = parallel(4)})
        .sink("sink", [](Tracked) {}, {.ordered = true});
    try {
      pipe.run();
    } catch (const StageError& error) {
      threw = true;
      EXPECT_EQ(error.stage(), "map");
      EXPECT_EQ(error.index(), kFailAt);
    }
    EXPECT_EQ(live.live(), 0);
  }
  EXPECT_TRUE(threw);
}

TEST(PipelineErrorTest, EveryItemThrowingInParallelMapYieldsOneStageErrorForAValidItem) {
  LiveCounter live;
  bool threw = false;
  {
    Pipeline pipe({.max_in_flight = 32, .threads = 4});
    pipe.source("source",
                [&live, next = std::uint64_t{0}]() mutable -> std::optional<Tracked> {
                  if (next == kItems) return std::nullopt;
                  return Tracked(live, next++);
                })
        .map("map",
             [](Tracked t) -> Tracked {
               sleep_us(10);
               throw InjectedFailure("always fails on " + std::to_string(t.value()));
             },
             {.concurrency = parallel(4)})
        .sink("sink", [](Tracked) {});
    try {
      pipe.run();
    } catch (const StageError& error) {
      threw = true;
      EXPECT_EQ(error.stage(), "map");
      EXPECT_LT(error.index(), kItems);
      EXPECT_TRUE(contains(error.what(), "always fails on " + std::to_string(error.index())));
    }
    EXPECT_EQ(live.live(), 0);
  }
  EXPECT_TRUE(threw);
}

TEST(PipelineErrorTest, NonStandardExceptionIsWrappedAndDescribedAsUnknown) {
  Pipeline pipe({.threads = 2});
  pipe.source("source",
              [next = 0]() mutable -> std::optional<int> {
                if (next == 20) return std::nullopt;
                return next++;
              })
      .map("map",
           [](int x) {
             if (x == 5) throw 42;
             return x;
           })
      .sink("sink", [](int) {});
  try {
    pipe.run();
    ADD_FAILURE() << "run() did not throw";
  } catch (const StageError& error) {
    EXPECT_EQ(error.stage(), "map");
    EXPECT_EQ(error.index(), 5u);
    EXPECT_EQ(describe(error.cause()), "unknown exception");
    EXPECT_TRUE(contains(error.what(), "unknown exception"));
    try {
      std::rethrow_exception(error.cause());
    } catch (int value) {
      EXPECT_EQ(value, 42);
    } catch (...) {
      ADD_FAILURE() << "cause() does not hold the thrown int";
    }
  }
}

TEST(StageErrorTest, WhatNamesStageItemAndOriginalMessage) {
  const StageError error("decode", 17, std::make_exception_ptr(std::runtime_error("boom")));
  EXPECT_EQ(std::string(error.what()), "stage 'decode' failed on item 17: boom");
  EXPECT_EQ(error.stage(), "decode");
  EXPECT_EQ(error.index(), 17u);
}

TEST(StageErrorTest, DescribeGivesWhatOfStdExceptionsAndUnknownOtherwise) {
  EXPECT_EQ(describe(std::make_exception_ptr(std::invalid_argument("bad arg"))), "bad arg");
  EXPECT_EQ(describe(std::make_exception_ptr(3.5)), "unknown exception");
}

// ---- OnError::skip ----------------------------------------------------------------------------

enum class SkipWhere { map, filter, emit };

const char* skip_name(SkipWhere where) {
  switch (where) {
    case SkipWhere::map:
      return "map";
    case SkipWhere::filter:
      return "filter";
    case SkipWhere::emit:
      return "emit";
  }
  return "?";
}

void PrintTo(SkipWhere where, std::ostream* out) { *out << skip_name(where); }

bool is_bad(std::uint64_t value) { return value % 10 == 3; }
std::string bad_reason(std::uint64_t value) { return "bad item " + std::to_string(value); }

/// source -> map -> filter -> emit -> sink, where the chosen stage (OnError::skip) throws on bad
/// items. Nothing is dropped otherwise.
RunReport run_with_skips(SkipWhere where, LiveCounter& live, std::vector<std::uint64_t>& consumed,
                         std::size_t max_listed_skips) {
  const auto options_for = [where](SkipWhere stage, Concurrency concurrency) {
    return StageOptions{.concurrency = concurrency, .on_error = stage == where ? OnError::skip : OnError::fail};
  };
  Pipeline pipe({.max_in_flight = 16, .threads = 4, .max_listed_skips = max_listed_skips});
  pipe.source("source",
              [&live, next = std::uint64_t{0}]() mutable -> std::optional<Tracked> {
                if (next == kItems) return std::nullopt;
                return Tracked(live, next++);
              })
      .map(
          "map",
          [where](Tracked t) {
            if (where == SkipWhere::map && is_bad(t.value())) throw InjectedFailure(bad_reason(t.value()));
            return t;
          },
          options_for(SkipWhere::map, parallel(3)))
      .filter(
          "filter",
          [where](Tracked t) -> std::optional<Tracked> {
            if (where == SkipWhere::filter && is_bad(t.value())) throw InjectedFailure(bad_reason(t.value()));
            return t;
          },
          options_for(SkipWhere::filter, parallel(2)))
      .emit<Tracked>(
          "emit",
          [where](Tracked t, Emitter<Tracked>& out) {
            if (where == SkipWhere::emit && is_bad(t.value())) throw InjectedFailure(bad_reason(t.value()));
            out.emit(std::move(t));
          },
          options_for(SkipWhere::emit, parallel(2)))
      .sink("sink", [&consumed](Tracked t) { consumed.push_back(t.value()); });
  return pipe.run();
}

class SkipPolicyTest : public ::testing::TestWithParam<SkipWhere> {};

TEST_P(SkipPolicyTest, SkippedItemsAreDroppedCountedAndListedWhileRunContinues) {
  const SkipWhere where = GetParam();
  LiveCounter live;
  std::vector<std::uint64_t> consumed;
  const RunReport report = run_with_skips(where, live, consumed, 10000);

  std::vector<std::uint64_t> expected_consumed;
  std::vector<std::uint64_t> expected_skipped;
  for (std::uint64_t i = 0; i < kItems; ++i) (is_bad(i) ? expected_skipped : expected_consumed).push_back(i);

  std::sort(consumed.begin(), consumed.end());
  EXPECT_EQ(consumed, expected_consumed);
  EXPECT_EQ(report.produced, kItems);
  EXPECT_EQ(report.consumed, expected_consumed.size());
  EXPECT_EQ(report.skipped, expected_skipped.size());
  EXPECT_EQ(stage_named(report.stages, skip_name(where)).skipped, expected_skipped.size());
  EXPECT_FALSE(report.stopped);
  EXPECT_FALSE(report.cancelled);

  auto listed = report.skipped_items;
  std::sort(listed.begin(), listed.end(), [](const SkippedItem& a, const SkippedItem& b) { return a.index < b.index; });
  ASSERT_EQ(listed.size(), expected_skipped.size());
  for (std::size_t i = 0; i < listed.size(); ++i) {
    EXPECT_EQ(listed[i].stage, skip_name(where));
    EXPECT_EQ(listed[i].index, expected_skipped[i]);
    EXPECT_EQ(listed[i].reason, bad_reason(expected_skipped[i]));
  }
  EXPECT_EQ(live.live(), 0);
}

INSTANTIATE_TEST_SUITE_P(EachStageKind, SkipPolicyTest,
                         ::testing::Values(SkipWhere::map, SkipWhere::filter, SkipWhere::emit),
                         [](const ::testing::TestParamInfo<SkipWhere>& param) { return skip_name(param.param); });

TEST(PipelineSkipTest, MaxListedSkipsLimitsTheListButAllSkipsAreCounted) {
  LiveCounter live;
  std::vector<std::uint64_t> consumed;
  const RunReport report = run_with_skips(SkipWhere::map, live, consumed, 5);
  EXPECT_EQ(report.skipped, kItems / 10);
  EXPECT_EQ(report.skipped_items.size(), 5u);
  for (const SkippedItem& item : report.skipped_items) {
    EXPECT_EQ(item.stage, "map");
    EXPECT_TRUE(is_bad(item.index));
    EXPECT_EQ(item.reason, bad_reason(item.index));
  }
  EXPECT_EQ(live.live(), 0);
}

}  // namespace
}  // namespace stoke::graph::test
