// Gated bodies (concepts.hpp, wake.hpp): a stage whose body needs a resource besides its input
// parks without a thread while ready() says no, and runs again once the resource rings its Wake.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace stoke::graph {
namespace {

using test::wait_until;

/// Permits handed out by the test: each call of a gated body takes one.
class Permits {
 public:
  /// The gate: true while a permit is left; otherwise keeps the Wake to ring on grant().
  bool ready(const Wake& wake) {
    std::lock_guard lock(mutex_);
    if (left_ > 0) return true;
    ++refusals_;
    waiting_ = wake;
    return false;
  }
  void take() {
    std::lock_guard lock(mutex_);
    ASSERT_GT(left_, 0) << "a call ran without a permit";
    --left_;
  }
  void grant(int n) {
    std::optional<Wake> wake;
    {
      std::lock_guard lock(mutex_);
      left_ += n;
      wake.swap(waiting_);
    }
    if (wake) (*wake)();
  }
  int refusals() const {
    std::lock_guard lock(mutex_);
    return refusals_;
  }
  std::optional<Wake> last_wake() const {
    std::lock_guard lock(mutex_);
    return waiting_;
  }

 private:
  mutable std::mutex mutex_;
  int left_ = 0;
  int refusals_ = 0;
  std::optional<Wake> waiting_;
};

auto count_to(std::uint64_t n) {
  return [i = std::uint64_t{0}, n]() mutable -> std::optional<std::uint64_t> {
    if (i == n) return std::nullopt;
    return i++;
  };
}

struct GatedMap {
  Permits* permits;
  bool ready(const Wake& wake) { return permits->ready(wake); }
  std::uint64_t operator()(std::uint64_t value) {
    permits->take();
    return value;
  }
};
static_assert(Gated<GatedMap>);
static_assert(!GatedFlush<GatedMap>);

// With one thread, a gated stage that parks must leave the thread to the others: the test's
// permits come in twos, from another thread, only once the stage has been refused.
TEST(PipelineGate, AClosedGateParksTheStageWithoutItsThread) {
  Permits permits;
  std::vector<std::uint64_t> seen;
  Pipeline pipe({.max_in_flight = 8, .threads = 1});
  pipe.source("numbers", count_to(20))
      .map("other", [](std::uint64_t v) { return v; })
      .map("gated", GatedMap{&permits}, {.ordered = true})
      .sink("collect", [&](std::uint64_t v) { seen.push_back(v); });
  std::thread granter([&] {
    for (int round = 0; round < 10; ++round) {
      ASSERT_TRUE(wait_until([&] { return permits.refusals() > round; })) << "the stage never asked again";
      permits.grant(2);
    }
  });
  auto run = std::async(std::launch::async, [&] { return pipe.run(); });
  ASSERT_EQ(run.wait_for(test::safety_deadline), std::future_status::ready) << "the gated pipeline hung";
  granter.join();
  const RunReport report = run.get();
  ASSERT_EQ(seen.size(), 20u);
  for (std::uint64_t i = 0; i < 20; ++i) EXPECT_EQ(seen[i], i);
  EXPECT_GE(permits.refusals(), 10);
  EXPECT_GT(test::stage_named(report.stages, "gated").blocked.count(), 0) << "a parked stage counts as blocked";
}

/// Emits the sum of everything it saw at the end; flushing takes a permit.
struct GatedSum {
  Permits* permits;
  std::uint64_t sum = 0;
  bool ready(const Wake&) { return true; }
  bool ready_to_flush(const Wake& wake) { return permits->ready(wake); }
  void operator()(std::uint64_t value, Emitter<std::uint64_t>&) { sum += value; }
  void flush(Emitter<std::uint64_t>& out) {
    permits->take();
    out.emit(sum);
  }
};
static_assert(GatedFlush<GatedSum>);

TEST(PipelineGate, TheFlushWaitsForItsOwnGate) {
  Permits permits;
  std::atomic<std::uint64_t> total = 0;
  Pipeline pipe({.threads = 2});
  pipe.source("numbers", count_to(10))
      .emit<std::uint64_t>("sum", GatedSum{&permits})
      .sink("collect", [&](std::uint64_t v) { total.store(v); });
  auto run = std::async(std::launch::async, [&] { return pipe.run(); });
  ASSERT_TRUE(wait_until([&] { return permits.refusals() > 0; }));
  EXPECT_EQ(run.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout) << "finished without flushing";
  permits.grant(1);
  ASSERT_EQ(run.wait_for(test::safety_deadline), std::future_status::ready) << "the ring did not finish the stage";
  run.get();
  EXPECT_EQ(total.load(), 45u);
}

TEST(PipelineGate, CancellingDoesNotWaitForAClosedGate) {
  Permits permits;
  Pipeline pipe({.max_in_flight = 4, .threads = 2});
  pipe.source("numbers", count_to(1000)).map("gated", GatedMap{&permits}).sink("drop", [](std::uint64_t) {});
  auto run = std::async(std::launch::async, [&] { return pipe.run(); });
  ASSERT_TRUE(wait_until([&] { return permits.refusals() > 0; }));
  pipe.cancel();
  ASSERT_EQ(run.wait_for(test::safety_deadline), std::future_status::ready) << "cancel waited for the gate";
  EXPECT_TRUE(run.get().cancelled);
}

// A cancel from another thread may come while run() is still starting the stages (a loader
// dropped at once): it must neither race with run() registering the gated stages (ThreadSanitizer
// found it) nor be lost -- the run ends cancelled, whichever came first.
TEST(PipelineGate, ACancelWhileTheRunStartsEndsIt) {
  for (int round = 0; round < 50; ++round) {
    Permits permits;
    Pipeline pipe({.max_in_flight = 4, .threads = 2});
    pipe.source("numbers", [] { return std::optional<std::uint64_t>(7); })  // endless
        .map("gated", GatedMap{&permits})
        .sink("drop", [](std::uint64_t) {});
    auto run = std::async(std::launch::async, [&] { return pipe.run(); });
    pipe.cancel();
    ASSERT_EQ(run.wait_for(test::safety_deadline), std::future_status::ready) << "round " << round;
    EXPECT_TRUE(run.get().cancelled);
  }
}

// A resource may ring long after the run (and the pipeline) is gone: nothing happens.
TEST(PipelineGate, RingingAfterThePipelineIsGoneDoesNothing) {
  Permits permits;
  {
    Pipeline pipe({.max_in_flight = 4, .threads = 2});
    pipe.source("numbers", count_to(100)).map("gated", GatedMap{&permits}).sink("drop", [](std::uint64_t) {});
    auto run = std::async(std::launch::async, [&] { return pipe.run(); });
    ASSERT_TRUE(wait_until([&] { return permits.refusals() > 0; }));
    pipe.cancel();
    run.get();
  }
  const std::optional<Wake> wake = permits.last_wake();
  ASSERT_TRUE(wake.has_value());
  (*wake)();  // rings a destroyed stage: a no-op (AddressSanitizer would see a use after free)
  permits.grant(5);
}

}  // namespace
}  // namespace stoke::graph
