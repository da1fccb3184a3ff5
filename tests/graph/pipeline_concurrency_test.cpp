// Concurrency: serial stages run one call at a time, parallel stages up to their limit, and the
// limit can be changed while the pipeline runs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "stoke/graph/graph.hpp"
#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

/// source (endless, until stopped) -> "work" (probed, sleeps 1 ms per call) -> sink.
struct ProbedPipeline {
  ConcurrencyProbe probe;
  Pipeline pipe{{.threads = 8}};

  explicit ProbedPipeline(Concurrency concurrency) {
    pipe.source("source", [next = 0]() mutable -> std::optional<int> { return next++; })
        .map("work",
             [this](int x) {
               ConcurrencyProbe::Scope scope(probe);
               sleep_us(1000);
               return x;
             },
             {.concurrency = concurrency})
        .sink("sink", [](int) {});
  }

  int stage_limit() const { return stage_named(pipe.stats(), "work").concurrency; }
};

template <class Control>
RunReport run_with_controller(Pipeline& pipe, Control control) {
  std::atomic<bool> finished{false};
  std::thread controller([&] { control(finished); });
  RunReport report;
  try {
    report = pipe.run();
  } catch (...) {
    finished = true;
    controller.join();
    throw;
  }
  finished = true;
  controller.join();
  return report;
}

TEST(PipelineConcurrencyTest, RaisingConcurrencyWhileRunningLetsCallsRiseToTheNewLimit) {
  ProbedPipeline p(parallel(1, 6, 1));
  bool ran_at_first_limit = false;
  int peak_at_first_limit = 0;
  int limit_after = 0;
  bool reached = false;
  const RunReport report = run_with_controller(p.pipe, [&](const std::atomic<bool>& finished) {
    ran_at_first_limit = wait_until([&] { return p.probe.calls() >= 20 || finished.load(); });
    peak_at_first_limit = p.probe.peak();
    p.probe.start_watch();
    p.pipe.set_concurrency("work", 4);
    limit_after = p.stage_limit();
    reached = wait_until([&] { return p.probe.watched_peak() >= 4 || finished.load(); });
    const std::uint64_t calls = p.probe.watched_calls();
    wait_until([&] { return p.probe.watched_calls() >= calls + 100 || finished.load(); });
    p.pipe.stop();
  });
  EXPECT_TRUE(ran_at_first_limit);
  EXPECT_EQ(peak_at_first_limit, 1) << "initial concurrency 1 must run one call at a time";
  EXPECT_EQ(limit_after, 4);
  EXPECT_TRUE(reached) << "concurrent calls never rose to the new limit";
  EXPECT_EQ(p.probe.watched_peak(), 4);
  EXPECT_TRUE(report.stopped);
}

TEST(PipelineConcurrencyTest, LoweringConcurrencyWhileRunningCapsCallsAtNewLimitOnceActiveHasFallen) {
  ProbedPipeline p(parallel(1, 6, 6));
  bool reached_initial = false;
  int limit_after = 0;
  bool fell = false;
  bool ran_after = false;
  const RunReport report = run_with_controller(p.pipe, [&](const std::atomic<bool>& finished) {
    reached_initial = wait_until([&] { return p.probe.peak() >= 6 || finished.load(); });
    p.pipe.set_concurrency("work", 2);
    limit_after = p.stage_limit();
    // Calls already running finish; once the stage reports no more than 2 running calls, no
    // call may start that takes it above 2 again.
    fell = wait_until([&] { return stage_named(p.pipe.stats(), "work").active <= 2 || finished.load(); });
    p.probe.start_watch();
    ran_after = wait_until([&] { return p.probe.watched_calls() >= 100 || finished.load(); });
    p.pipe.stop();
  });
  EXPECT_TRUE(reached_initial) << "initial concurrency 6 was never reached";
  EXPECT_EQ(p.probe.peak(), 6);
  EXPECT_EQ(limit_after, 2);
  EXPECT_TRUE(fell) << "running calls never fell to the new limit";
  EXPECT_TRUE(ran_after);
  EXPECT_LE(p.probe.watched_peak(), 2);
  EXPECT_EQ(p.probe.watched_peak(), 2) << "the stage should keep running 2 calls at once";
  EXPECT_TRUE(report.stopped);
}

TEST(PipelineConcurrencyTest, ParallelStageRunsUpToItsMaxConcurrencyAndNoMore) {
  ConcurrencyProbe probe;
  Pipeline pipe({.threads = 8});
  pipe.source("source",
              [next = 0]() mutable -> std::optional<int> {
                if (next == 200) return std::nullopt;
                return next++;
              })
      .map("work",
           [&](int x) {
             ConcurrencyProbe::Scope scope(probe);
             sleep_us(1000);
             return x;
           },
           {.concurrency = parallel(4)})
      .sink("sink", [](int) {});
  pipe.run();
  EXPECT_EQ(probe.calls(), 200u);
  EXPECT_EQ(probe.peak(), 4);
}

TEST(PipelineConcurrencyTest, SerialSourceMapAndSinkNeverRunTwoCallsAtOnce) {
  ConcurrencyProbe source_probe;
  ConcurrencyProbe serial_probe;
  ConcurrencyProbe sink_probe;
  Pipeline pipe({.threads = 8});
  pipe.source("source",
              [&, next = 0]() mutable -> std::optional<int> {
                ConcurrencyProbe::Scope scope(source_probe);
                if (next == 300) return std::nullopt;
                sleep_us(20);
                return next++;
              })
      .map("fan_out",
           [](int x) {
             sleep_us(200);
             return x;
           },
           {.concurrency = parallel(4)})
      .map("serial",
           [&](int x) {
             ConcurrencyProbe::Scope scope(serial_probe);
             sleep_us(50);
             return x;
           })
      .map("fan_out_again",
           [](int x) {
             sleep_us(200);
             return x;
           },
           {.concurrency = parallel(4)})
      .sink("sink", [&](int) {
        ConcurrencyProbe::Scope scope(sink_probe);
        sleep_us(50);
      });
  pipe.run();
  EXPECT_EQ(source_probe.peak(), 1);
  EXPECT_EQ(serial_probe.peak(), 1);
  EXPECT_EQ(sink_probe.peak(), 1);
  EXPECT_EQ(serial_probe.calls(), 300u);
  EXPECT_EQ(sink_probe.calls(), 300u);
}

/// Counts what it gets and emits the count once, at the end (a flush, as a batcher's last batch).
struct CountAtTheEnd {
  int seen = 0;
  void operator()(int, Emitter<int>&) { ++seen; }
  void flush(Emitter<int>& out) { out.emit(seen); }
};

// Permits a gated map takes one per item; another thread grants more, ringing the Wake the map
// left when it ran out.
class Permits {
 public:
  bool ready(const Wake& wake) {
    const std::lock_guard lock(mutex_);
    if (left_ > 0) return true;
    waiting_ = wake;
    return false;
  }
  void take() {
    const std::lock_guard lock(mutex_);
    --left_;
  }
  bool grant_if_waiting(int n) {
    std::optional<Wake> wake;
    {
      const std::lock_guard lock(mutex_);
      if (!waiting_) return false;
      left_ += n;
      wake.swap(waiting_);
    }
    (*wake)();
    return true;
  }

 private:
  std::mutex mutex_;
  int left_ = 0;
  std::optional<Wake> waiting_;
};

struct GatedMap {
  Permits* permits;
  bool ready(const Wake& wake) { return permits->ready(wake); }
  int operator()(int v) {
    permits->take();
    return v;
  }
};

// Found by ThreadSanitizer (scripts/tsan.sh): in a one-thread pipeline, work woken from outside
// it (here a Wake rung by another thread) is enqueued into the arena, and oneTBB then adds a
// worker beside the thread in run() -- an arena always has room for two. A serial stage entered
// without counting its slot (a "carried" visit, taken where the limit cannot bind: it took the
// arena's one thread for all there are) then ran two calls at once.
TEST(PipelineConcurrencyTest, ASerialStageOfAOneThreadPipelineRunsOneCallAtATimeWhateverWakesIt) {
  constexpr int kItems = 2000;
  for (int round = 0; round < 3; ++round) {
    Permits permits;
    std::atomic<int> inside{0};
    std::atomic<int> overlaps{0};
    std::atomic<bool> done{false};
    int calls = 0;  // plain: two calls at once would race on it
    Pipeline pipe({.max_in_flight = 8, .threads = 1});
    pipe.source("count",
                [i = 0]() mutable -> std::optional<int> { return i < kItems ? std::optional(i++) : std::nullopt; })
        .map("other", [](int v) { return v; })
        .map("gated", GatedMap{&permits}, {.ordered = true})
        .sink("serial", [&](int) {
          if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
          ++calls;
          const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
          while (std::chrono::steady_clock::now() < until) {
          }
          inside.fetch_sub(1);
        });
    std::thread granter([&] {
      while (!done.load())
        if (!permits.grant_if_waiting(2)) std::this_thread::yield();
    });
    pipe.run();
    done.store(true);
    granter.join();
    EXPECT_EQ(overlaps.load(), 0) << "round " << round;
    EXPECT_EQ(calls, kItems);
  }
}

TEST(PipelineConcurrencyTest, AStageWhoseInputClosesDuringCallsItDidNotCountWaitsForThem) {
  // "work" may run as many calls as there are threads, so the calls carried into it are not
  // counted in its slots (a carried visit). The source ends while they sleep: the stage's input
  // closes with nothing queued and no slot held, and it must still wait for those calls before it
  // finishes and closes the next stage's input -- or "count" would flush before their items.
  for (int round = 0; round < 10; ++round) {
    Pipeline pipe({.threads = 2});
    std::vector<int> counts;
    pipe.source("source",
                [next = 0]() mutable -> std::optional<int> { return next < 2 ? std::optional(next++) : std::nullopt; })
        .map("work",
             [](int x) {
               sleep_us(5000);
               return x;
             },
             {.concurrency = parallel(2)})
        .emit<int>("count", CountAtTheEnd{})
        .sink("sink", [&](int count) { counts.push_back(count); });
    pipe.run();
    ASSERT_EQ(counts, std::vector<int>{2}) << "round " << round << ": the flush came before every item";
  }
}

TEST(PipelineConcurrencyTest, SetConcurrencyClampsToTheStageRange) {
  Pipeline pipe;
  pipe.source("source", [] { return std::optional<int>(); })
      .map("work", [](int x) { return x; }, {.concurrency = parallel(2, 5, 3)})
      .sink("sink", [](int) {});
  EXPECT_EQ(stage_named(pipe.stats(), "work").concurrency, 3);
  EXPECT_EQ(stage_named(pipe.stats(), "work").min_concurrency, 2);
  EXPECT_EQ(stage_named(pipe.stats(), "work").max_concurrency, 5);
  pipe.set_concurrency("work", 100);
  EXPECT_EQ(stage_named(pipe.stats(), "work").concurrency, 5);
  pipe.set_concurrency("work", 0);
  EXPECT_EQ(stage_named(pipe.stats(), "work").concurrency, 2);
  pipe.set_concurrency("work", 4);
  EXPECT_EQ(stage_named(pipe.stats(), "work").concurrency, 4);
  pipe.set_concurrency("sink", 8);
  EXPECT_EQ(stage_named(pipe.stats(), "sink").concurrency, 1) << "a serial stage stays serial";
}

TEST(PipelineConcurrencyTest, SetConcurrencyOnUnknownStageThrowsInvalidArgumentListingStageNames) {
  Pipeline pipe;
  pipe.source("alpha", [] { return std::optional<int>(); })
      .map("beta", [](int x) { return x; }, {.concurrency = parallel(4)})
      .sink("gamma", [](int) {});
  try {
    pipe.set_concurrency("delta", 2);
    ADD_FAILURE() << "set_concurrency on an unknown stage did not throw";
  } catch (const std::invalid_argument& error) {
    EXPECT_TRUE(contains(error.what(), "alpha"));
    EXPECT_TRUE(contains(error.what(), "beta"));
    EXPECT_TRUE(contains(error.what(), "gamma"));
  }
}

}  // namespace
}  // namespace stoke::graph::test
