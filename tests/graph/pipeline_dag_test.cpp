// Pipelines that are graphs: a fan-out into branches, a join by source position, several sinks.
// Every item exactly once, bounded memory, order restored after a join, drops on one branch taken
// for all, failures and starving joins reported -- at several thread counts and capacities.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

auto count_to(std::uint64_t n) {
  return [i = std::uint64_t{0}, n]() mutable -> std::optional<std::uint64_t> {
    if (i == n) return std::nullopt;
    return i++;
  };
}

/// A copyable item that counts its live copies (a fan-out copies it into every branch but one).
class Copied {
 public:
  Copied(LiveCounter& counter, std::uint64_t value) : counter_(&counter), value_(value) { counter_->add(); }
  Copied(const Copied& other) : counter_(other.counter_), value_(other.value_) {
    if (counter_) counter_->add();
  }
  Copied(Copied&& other) noexcept : counter_(std::exchange(other.counter_, nullptr)), value_(other.value_) {}
  Copied& operator=(Copied other) noexcept {
    std::swap(counter_, other.counter_);
    value_ = other.value_;
    return *this;
  }
  ~Copied() {
    if (counter_) counter_->remove();
  }
  std::uint64_t value() const noexcept { return value_; }

 private:
  LiveCounter* counter_;
  std::uint64_t value_;
};

}  // namespace
}  // namespace stoke::graph::test

// Its copies are cheap and independent, which fan_out cannot see from the type: said here.
template <>
inline constexpr bool stoke::graph::fan_out_copies<stoke::graph::test::Copied> = true;

namespace stoke::graph::test {
namespace {

struct Shape {
  int threads;
  std::size_t capacity;  // of every stage (0: the default)
  bool slow_left;        // one branch much slower than the other
};

class FanOutJoin : public ::testing::TestWithParam<Shape> {};

// Every position reaches the sink once, as the pair of its two branches' results; the items alive
// at once stay within the in-flight bound (times the copies a fan-out makes).
TEST_P(FanOutJoin, EveryItemExactlyOnceWithBoundedMemory) {
  const Shape shape = GetParam();
  constexpr std::uint64_t count = 600;
  constexpr std::size_t max_in_flight = 8;
  LiveCounter live;
  std::atomic<std::size_t> peak_in_flight = 0;
  std::vector<int> seen(count, 0);
  std::vector<std::uint64_t> bad;
  Pipeline pipe({.max_in_flight = max_in_flight, .threads = shape.threads});
  const StageOptions branch{.concurrency = parallel(3), .capacity = shape.capacity};
  auto [left, right] = pipe.source("numbers",
                                   [&, next = count_to(count)]() mutable -> std::optional<Copied> {
                                     auto v = next();
                                     if (!v) return std::nullopt;
                                     return Copied(live, *v);
                                   })
                           .fan_out("views", {.capacity = shape.capacity});
  auto doubled = std::move(left).map(
      "double",
      [&](Copied c) {
        if (shape.slow_left) sleep_us(300);
        return c.value() * 2;
      },
      branch);
  auto tripled = std::move(right).map(
      "triple",
      [&](Copied c) {
        if (!shape.slow_left && c.value() % 7 == 0) sleep_us(100);
        return c.value() * 3;
      },
      branch);
  join("pair", {.capacity = shape.capacity}, std::move(doubled), std::move(tripled))
      .sink(
          "check",
          [&](std::tuple<std::uint64_t, std::uint64_t> pair) {
            const auto [two, three] = pair;
            const std::uint64_t v = two / 2;
            if (three != 3 * v || v >= count) bad.push_back(v);
            else ++seen[v];
            peak_in_flight = std::max(peak_in_flight.load(), pipe.in_flight());
          },
          {.capacity = shape.capacity});
  auto run = std::async(std::launch::async, [&] { return pipe.run(); });
  ASSERT_EQ(run.wait_for(safety_deadline), std::future_status::ready) << "the graph hung";
  const RunReport report = run.get();
  EXPECT_TRUE(bad.empty()) << bad.size() << " mismatched pairs, first " << bad.front();
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<long>(count)) << "an item missing or twice";
  EXPECT_EQ(report.consumed, count);
  EXPECT_LE(peak_in_flight.load(), max_in_flight);
  // A source item is at most 2 live copies (one per branch), and at most max_in_flight items
  // (plus the one the source is making) are alive.
  EXPECT_LE(live.peak(), static_cast<long>(2 * (max_in_flight + 1)));
  EXPECT_EQ(live.live(), 0);
  EXPECT_EQ(pipe.in_flight(), 0u);
}

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  return "threads" + std::to_string(info.param.threads) + "_capacity" + std::to_string(info.param.capacity) +
         (info.param.slow_left ? "_slowleft" : "_even");
}

INSTANTIATE_TEST_SUITE_P(Shapes, FanOutJoin,
                         ::testing::Values(Shape{1, 0, false}, Shape{2, 0, false}, Shape{8, 0, false},
                                           Shape{1, 1, true}, Shape{2, 1, true}, Shape{8, 1, true},
                                           Shape{2, 0, true}),
                         shape_name);

TEST(PipelineDag, AnOrderedStageAfterTheJoinSeesSourceOrder) {
  std::vector<std::uint64_t> order;
  Pipeline pipe({.max_in_flight = 32, .threads = 4});
  auto [a, b] = pipe.source("numbers", count_to(300)).fan_out("split");
  auto jittered = std::move(a).map(
      "jitter",
      [](std::uint64_t v) {
        if (v % 5 == 0) sleep_us(200);
        return v;
      },
      {.concurrency = parallel(4)});
  auto plain = std::move(b).map("same", [](std::uint64_t v) { return v; }, {.concurrency = parallel(2)});
  join("pair", std::move(jittered), std::move(plain))
      .sink("in-order", [&](std::tuple<std::uint64_t, std::uint64_t> p) { order.push_back(std::get<0>(p)); },
            {.ordered = true});
  pipe.run();
  ASSERT_EQ(order.size(), 300u);
  for (std::uint64_t i = 0; i < 300; ++i) ASSERT_EQ(order[i], i) << "out of order at " << i;
}

// A position that one branch drops is dropped on every branch: its partner is destroyed, the
// drop counted once, and ordered stages after the join still move past it.
TEST(PipelineDag, ADropOnOneBranchDropsItsPartnersOnce) {
  LiveCounter live;
  std::vector<std::uint64_t> joined;
  Pipeline pipe({.max_in_flight = 16, .threads = 2});
  auto [a, b] = pipe.source("numbers",
                            [&, next = count_to(100)]() mutable -> std::optional<Copied> {
                              auto v = next();
                              return v ? std::optional<Copied>(Copied(live, *v)) : std::nullopt;
                            })
                    .fan_out("split");
  auto odd_dropped = std::move(a).filter("evens", [](Copied c) -> std::optional<Copied> {
    return c.value() % 2 == 0 ? std::optional<Copied>(std::move(c)) : std::nullopt;
  });
  join("pair", std::move(odd_dropped), std::move(b))
      .sink("collect", [&](std::tuple<Copied, Copied> p) { joined.push_back(std::get<1>(p).value()); },
            {.ordered = true});
  const RunReport report = pipe.run();
  ASSERT_EQ(joined.size(), 50u);
  for (std::size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], 2 * i);
  EXPECT_EQ(stage_named(report.stages, "evens").dropped, 50u);
  EXPECT_EQ(report.consumed, 50u);
  EXPECT_EQ(live.live(), 0) << "a dropped position's partner was kept";
  EXPECT_EQ(pipe.in_flight(), 0u) << "a dropped position's credit did not come back";
}

TEST(PipelineDag, AFailingBranchCancelsTheGraphNamingTheStageAndItem) {
  std::atomic<int> sunk = 0;
  Pipeline pipe({.max_in_flight = 8, .threads = 4});
  auto [a, b] = pipe.source("numbers", count_to(1000)).fan_out("split");
  auto failing = std::move(a).map("fragile", [](std::uint64_t v) {
    if (v == 123) throw InjectedFailure("cannot handle 123");
    return v;
  });
  join("pair", std::move(failing), std::move(b)).sink("count", [&](std::tuple<std::uint64_t, std::uint64_t>) {
    sunk.fetch_add(1);
  });
  try {
    pipe.run();
    FAIL() << "the run did not fail";
  } catch (const StageError& error) {
    EXPECT_EQ(error.stage(), "fragile");
    EXPECT_EQ(error.index(), 123u);
    EXPECT_TRUE(contains(error.what(), "cannot handle 123"));
  }
  EXPECT_LT(sunk.load(), 1000);
  EXPECT_EQ(pipe.in_flight(), 0u) << "a stranded item kept its credit";
}

// A branch that drops everything: the join can never complete. Reported, naming the join and the
// branch, rather than a run that silently joins nothing (or, without holes, a hang).
TEST(PipelineDag, AStarvingJoinIsReportedNotHung) {
  for (const std::size_t starve_after : {std::size_t{0}, std::size_t{40}}) {
    Pipeline pipe({.max_in_flight = 8, .threads = 2});
    auto [a, b] = pipe.source("numbers", count_to(starve_after == 0 ? 30 : 100000)).fan_out("split");
    auto nothing = std::move(a).filter("reject-all", [](std::uint64_t) -> std::optional<std::uint64_t> {
      return std::nullopt;
    });
    join("pair", {.starve_after = starve_after}, std::move(nothing), std::move(b))
        .sink("never", [](std::tuple<std::uint64_t, std::uint64_t>) {});
    auto run = std::async(std::launch::async, [&] { return pipe.run(); });
    ASSERT_EQ(run.wait_for(safety_deadline), std::future_status::ready) << "a starving join hung";
    try {
      run.get();
      FAIL() << "a join that joined nothing was not reported (starve_after " << starve_after << ")";
    } catch (const StageError& error) {
      EXPECT_EQ(error.stage(), "pair");
      EXPECT_TRUE(contains(error.what(), "starves")) << error.what();
      EXPECT_TRUE(contains(error.what(), "'reject-all'")) << error.what();
    }
    EXPECT_EQ(pipe.in_flight(), 0u);
  }
}

// A graph may end in several sinks: a side stream of statistics beside the main one.
TEST(PipelineDag, SeveralSinksEachSeeEveryItem) {
  std::atomic<std::uint64_t> sum = 0;
  std::vector<std::uint64_t> main_stream;
  Pipeline pipe({.max_in_flight = 16, .threads = 3});
  auto [train, stats] = pipe.source("numbers", count_to(500)).fan_out("tee");
  std::move(train).map("work", [](std::uint64_t v) { return v + 1; }).sink("train", [&](std::uint64_t v) {
    main_stream.push_back(v);
  }, {.ordered = true});
  std::move(stats).sink("stats", [&](std::uint64_t v) { sum.fetch_add(v); });
  const RunReport report = pipe.run();
  ASSERT_EQ(main_stream.size(), 500u);
  for (std::uint64_t i = 0; i < 500; ++i) ASSERT_EQ(main_stream[i], i + 1);
  EXPECT_EQ(sum.load(), 499u * 500u / 2u);
  EXPECT_EQ(report.consumed, 1000u) << "both sinks count";
  EXPECT_EQ(pipe.in_flight(), 0u);
}

// Three branches, nested: a fan-out inside a branch, joined inside it, then joined again.
// What a fan-out may copy: small plain values and read-only shared handles; a container (a deep
// copy per branch), a writable shared handle (two branches writing one item) or a big struct only
// when shared first.
static_assert(fan_out_copies<std::uint64_t>);
static_assert(fan_out_copies<std::tuple<int, double>>);
static_assert(fan_out_copies<std::shared_ptr<const std::vector<int>>>);
static_assert(!fan_out_copies<std::vector<int>>);
static_assert(!fan_out_copies<std::string>);
static_assert(!fan_out_copies<std::shared_ptr<std::vector<int>>>);
static_assert(!fan_out_copies<std::array<char, 4096>>);

TEST(PipelineDag, SharedItemsReachEveryBranchWithoutACopy) {
  Pipeline pipe({.threads = 2});
  std::atomic<std::uint64_t> sum{0};
  auto [a, b] = pipe.source("vectors",
                            [i = 0]() mutable -> std::optional<std::vector<int>> {
                              return i < 50 ? std::optional(std::vector<int>(1000, i++)) : std::nullopt;
                            })
                    .map("share", share<std::vector<int>>)
                    .fan_out("split");
  auto first = std::move(a).map("first", [](std::shared_ptr<const std::vector<int>> v) { return v; });
  auto total = std::move(b).map("total", [](std::shared_ptr<const std::vector<int>> v) {
    return std::make_pair(v, std::accumulate(v->begin(), v->end(), std::uint64_t{0}));
  });
  join("pair", std::move(first), std::move(total))
      .sink("check", [&](std::tuple<std::shared_ptr<const std::vector<int>>,
                                    std::pair<std::shared_ptr<const std::vector<int>>, std::uint64_t>> pair) {
        auto& [v, with_total] = pair;
        EXPECT_EQ(v.get(), with_total.first.get()) << "the branches got copies, not the one item";
        sum += with_total.second;
      });
  const RunReport report = pipe.run();
  EXPECT_EQ(report.consumed, 50u);
  EXPECT_EQ(sum.load(), 1000u * (49u * 50u / 2u));
}

TEST(PipelineDag, NestedFanOutsAndJoins) {
  std::vector<std::uint64_t> out;
  Pipeline pipe({.max_in_flight = 8, .threads = 4});
  auto [outer_a, outer_b] = pipe.source("numbers", count_to(200)).fan_out("outer");
  auto [inner_a, inner_b] = std::move(outer_a).fan_out("inner");
  auto plus = std::move(inner_a).map("plus", [](std::uint64_t v) { return v + 1; }, {.concurrency = parallel(2)});
  auto inner = join("inner-pair", std::move(plus), std::move(inner_b))
                   .map("sum", [](std::tuple<std::uint64_t, std::uint64_t> p) {
                     return std::get<0>(p) + std::get<1>(p);  // 2v + 1
                   });
  join("outer-pair", std::move(inner), std::move(outer_b))
      .sink("collect", [&](std::tuple<std::uint64_t, std::uint64_t> p) {
        out.push_back(std::get<0>(p) - 2 * std::get<1>(p));
      });
  pipe.run();
  ASSERT_EQ(out.size(), 200u);
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](std::uint64_t x) { return x == 1; }));
  EXPECT_EQ(pipe.in_flight(), 0u);
}

TEST(PipelineDag, CancelDuringAJoinStrandsNothing) {
  LiveCounter live;
  Pipeline pipe({.max_in_flight = 16, .threads = 4});
  auto [a, b] = pipe.source("numbers",
                            [&, next = count_to(100000)]() mutable -> std::optional<Copied> {
                              auto v = next();
                              return v ? std::optional<Copied>(Copied(live, *v)) : std::nullopt;
                            })
                    .fan_out("split");
  auto slow = std::move(a).map("slow", [](Copied c) {
    sleep_us(200);
    return c;
  });
  std::atomic<int> joined = 0;
  join("pair", std::move(slow), std::move(b)).sink("count", [&](std::tuple<Copied, Copied>) { joined.fetch_add(1); });
  auto run = std::async(std::launch::async, [&] { return pipe.run(); });
  ASSERT_TRUE(wait_until([&] { return joined.load() > 10; }));
  pipe.cancel();
  ASSERT_EQ(run.wait_for(safety_deadline), std::future_status::ready);
  EXPECT_TRUE(run.get().cancelled);
  EXPECT_EQ(live.live(), 0) << "an item was stranded in a branch or the join";
  EXPECT_EQ(pipe.in_flight(), 0u);
}

TEST(PipelineDag, BuildingAWrongGraphSaysWhatToDo) {
  {
    Pipeline pipe;
    auto [a, b] = pipe.source("numbers", count_to(3)).fan_out("split");
    std::move(a).sink("only", [](std::uint64_t) {});
    (void)b;
    try {
      pipe.run();
      FAIL() << "a branch that goes nowhere was accepted";
    } catch (const std::logic_error& error) {
      EXPECT_TRUE(contains(error.what(), "'split' goes nowhere")) << error.what();
    }
  }
  {
    // An emit on one branch numbers its outputs afresh: positions no longer match.
    Pipeline pipe;
    auto [a, b] = pipe.source("numbers", count_to(3)).fan_out("split");
    auto twice = std::move(a).emit<std::uint64_t>("twice", [](std::uint64_t v, Emitter<std::uint64_t>& out) {
      out.emit(v);
      out.emit(v);
    });
    join("pair", std::move(twice), std::move(b)).sink("s", [](std::tuple<std::uint64_t, std::uint64_t>) {});
    try {
      pipe.run();
      FAIL() << "a join across an emit was accepted";
    } catch (const std::logic_error& error) {
      EXPECT_TRUE(contains(error.what(), "join 'pair'")) << error.what();
      EXPECT_TRUE(contains(error.what(), "'twice'")) << error.what();
    }
  }
}

}  // namespace
}  // namespace stoke::graph::test
