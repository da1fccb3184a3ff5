// Ending a run early: cancel() discards, stop() drains, and SIGINT under a SignalStop guard.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <thread>

#include "stoke/graph/graph.hpp"
#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

/// Produces Tracked items 0, 1, 2, ... forever, counting them.
auto endless_source(LiveCounter& live, std::atomic<std::uint64_t>& produced) {
  return [&live, &produced]() -> std::optional<Tracked> { return Tracked(live, produced++); };
}

/// Runs `control` on another thread while `pipe.run()` runs on this one. `control` gets a flag
/// that turns true once run() has returned, to bound its waits.
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

TEST(PipelineCancelTest, CancelFromAnotherThreadEndsRunWithEndlessSourceAndDestroysEveryItem) {
  LiveCounter live;
  std::atomic<std::uint64_t> produced{0};
  std::atomic<std::uint64_t> consumed{0};
  RunReport report;
  {
    Pipeline pipe({.max_in_flight = 4, .threads = 4});
    pipe.source("source", endless_source(live, produced))
        .map("work",
             [](Tracked t) {
               sleep_us(100);
               return t;
             },
             {.concurrency = parallel(2)})
        .sink("sink", [&](Tracked) {
          sleep_us(200);
          ++consumed;
        });
    report = run_with_controller(pipe, [&](const std::atomic<bool>& finished) {
      wait_until([&] { return consumed.load() >= 20 || finished.load(); });
      pipe.cancel();
    });
    EXPECT_EQ(live.live(), 0) << "every item must be destroyed by the time run() returns";
  }
  EXPECT_TRUE(report.cancelled);
  EXPECT_FALSE(report.stopped);
  EXPECT_GE(report.consumed, 20u);
  EXPECT_LE(report.consumed, report.produced);
  EXPECT_EQ(report.consumed, consumed.load());
}

TEST(PipelineCancelTest, CancelDestroysQueuedItemsWithoutPassingThemToTheSink) {
  LiveCounter live;
  std::atomic<std::uint64_t> produced{0};
  std::atomic<std::uint64_t> sink_calls{0};
  Gate gate;
  RunReport report;
  bool queue_filled = false;
  {
    Pipeline pipe({.max_in_flight = 64, .threads = 4});
    pipe.source("source", endless_source(live, produced))
        .sink("sink",
              [&](Tracked) {
                ++sink_calls;
                gate.wait();
              },
              {.capacity = 4});
    report = run_with_controller(pipe, [&](const std::atomic<bool>& finished) {
      // The first sink call is held at the gate while items pile up in the sink's buffer.
      queue_filled = wait_until([&] { return stage_named(pipe.stats(), "sink").queued >= 4 || finished.load(); });
      pipe.cancel();
      gate.open();
    });
    EXPECT_EQ(live.live(), 0);
  }
  EXPECT_TRUE(queue_filled);
  EXPECT_TRUE(report.cancelled);
  EXPECT_EQ(sink_calls.load(), 1u) << "queued items must be destroyed unprocessed; only the running call finishes";
  EXPECT_EQ(report.consumed, sink_calls.load());
  EXPECT_GT(report.produced, report.consumed);
}

TEST(PipelineStopTest, StopFromAnotherThreadDrainsEveryProducedItemToTheSink) {
  LiveCounter live;
  std::atomic<std::uint64_t> produced{0};
  std::atomic<std::uint64_t> consumed{0};
  RunReport report;
  {
    Pipeline pipe({.max_in_flight = 16, .threads = 4});
    pipe.source("source", endless_source(live, produced))
        .map("work",
             [](Tracked t) {
               sleep_us(100);
               return t;
             },
             {.concurrency = parallel(3)})
        .sink("sink", [&](Tracked) {
          sleep_us(100);
          ++consumed;
        });
    report = run_with_controller(pipe, [&](const std::atomic<bool>& finished) {
      wait_until([&] { return consumed.load() >= 30 || finished.load(); });
      pipe.stop();
    });
    EXPECT_EQ(live.live(), 0);
  }
  EXPECT_TRUE(report.stopped);
  EXPECT_FALSE(report.cancelled);
  EXPECT_GE(consumed.load(), 30u);
  EXPECT_EQ(consumed.load(), produced.load()) << "every item the source produced must reach the sink";
  EXPECT_EQ(report.produced, produced.load());
  EXPECT_EQ(report.consumed, consumed.load());
}

TEST(PipelineStopTest, StopWhileSinkIsHeldStillDeliversQueuedItems) {
  LiveCounter live;
  std::atomic<std::uint64_t> produced{0};
  std::atomic<std::uint64_t> consumed{0};
  Gate gate;
  bool queue_filled = false;
  RunReport report;
  {
    Pipeline pipe({.max_in_flight = 64, .threads = 4});
    pipe.source("source", endless_source(live, produced))
        .sink("sink",
              [&](Tracked) {
                gate.wait();
                ++consumed;
              },
              {.capacity = 4});
    report = run_with_controller(pipe, [&](const std::atomic<bool>& finished) {
      queue_filled = wait_until([&] { return stage_named(pipe.stats(), "sink").queued >= 4 || finished.load(); });
      pipe.stop();
      gate.open();
    });
    EXPECT_EQ(live.live(), 0);
  }
  EXPECT_TRUE(queue_filled);
  EXPECT_TRUE(report.stopped);
  EXPECT_GE(consumed.load(), 5u) << "the held call and the queued items";
  EXPECT_EQ(consumed.load(), produced.load());
  EXPECT_EQ(report.consumed, produced.load());
}

// ---- SIGINT -----------------------------------------------------------------------------------

/// A pipeline with an endless source whose sink raises SIGINT `signals` times when it reaches
/// item 20 (raise() runs the handler on the calling thread before it returns, so the signal
/// arrives while the run is still going).
RunReport run_raising_sigint(int signals, bool stop_on_signal, LiveCounter& live, std::atomic<std::uint64_t>& produced,
                             std::atomic<std::uint64_t>& consumed, std::uint64_t source_items = 0) {
  Pipeline pipe({.max_in_flight = 16, .threads = 4, .stop_on_signal = stop_on_signal});
  pipe.source("source",
              [&live, &produced, source_items]() -> std::optional<Tracked> {
                if (source_items != 0 && produced.load() == source_items) return std::nullopt;
                return Tracked(live, produced++);
              })
      .map("work",
           [](Tracked t) {
             sleep_us(50);
             return t;
           },
           {.concurrency = parallel(2)})
      .sink("sink", [&, signals](Tracked t) {
        if (t.value() == 20) {
          for (int i = 0; i < signals; ++i) std::raise(SIGINT);
        }
        sleep_us(50);
        ++consumed;
      });
  return pipe.run();
}

TEST(PipelineSignalTest, FirstSigintDrainsLikeStop) {
  SignalStop guard;
  SignalStop::reset();
  LiveCounter live;
  std::atomic<std::uint64_t> produced{0};
  std::atomic<std::uint64_t> consumed{0};
  const RunReport report = run_raising_sigint(1, true, live, produced, consumed);
  EXPECT_EQ(SignalStop::received(), 1);
  EXPECT_TRUE(report.stopped);
  EXPECT_FALSE(report.cancelled);
  EXPECT_GT(consumed.load(), 20u);
  EXPECT_EQ(consumed.load(), produced.load()) << "a drain delivers every produced item";
  EXPECT_EQ(report.consumed, report.produced);
  EXPECT_EQ(live.live(), 0);
}

TEST(PipelineSignalTest, SecondSigintCancels) {
  SignalStop guard;
  SignalStop::reset();
  LiveCounter live;
  std::atomic<std::uint64_t> produced{0};
  std::atomic<std::uint64_t> consumed{0};
  const RunReport report = run_raising_sigint(2, true, live, produced, consumed);
  EXPECT_EQ(SignalStop::received(), 2);
  EXPECT_TRUE(report.cancelled);
  EXPECT_EQ(live.live(), 0);
}

TEST(PipelineSignalTest, PipelineWithoutStopOnSignalRunsToTheEndDespiteSigint) {
  constexpr std::uint64_t kItems = 100;
  SignalStop guard;
  SignalStop::reset();
  LiveCounter live;
  std::atomic<std::uint64_t> produced{0};
  std::atomic<std::uint64_t> consumed{0};
  const RunReport report = run_raising_sigint(1, false, live, produced, consumed, kItems);
  EXPECT_EQ(SignalStop::received(), 1);
  EXPECT_FALSE(report.stopped);
  EXPECT_FALSE(report.cancelled);
  EXPECT_EQ(consumed.load(), kItems);
  EXPECT_EQ(live.live(), 0);
}

TEST(PipelineSignalTest, ResetForgetsReceivedSignals) {
  SignalStop guard;
  SignalStop::reset();
  std::raise(SIGINT);
  EXPECT_EQ(SignalStop::received(), 1);
  SignalStop::reset();
  EXPECT_EQ(SignalStop::received(), 0);
}

TEST(PipelineSignalTest, SignalBeforeRunDoesNotStopALaterRunAfterReset) {
  SignalStop guard;
  std::raise(SIGINT);
  SignalStop::reset();
  constexpr std::uint64_t kItems = 50;
  LiveCounter live;
  std::atomic<std::uint64_t> produced{0};
  std::atomic<std::uint64_t> consumed{0};
  const RunReport report = run_raising_sigint(0, true, live, produced, consumed, kItems);
  EXPECT_FALSE(report.stopped);
  EXPECT_EQ(consumed.load(), kItems);
}

// A user who presses Ctrl-C again does not want to wait for the drain: with exit_at = 2 the
// second signal ends the process at once, with the shell's code for death by that signal.
TEST(PipelineSignalDeathTest, SecondSignalExitsAtOnceWhenAsked) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        SignalStop guard(2);
        std::raise(SIGINT);  // the first: counted, the process goes on
        if (SignalStop::received() != 1) std::_Exit(3);
        std::raise(SIGINT);  // the second: _exit(128 + SIGINT) inside the handler
        std::_Exit(4);
      },
      ::testing::ExitedWithCode(128 + SIGINT), "stopped at once");
}

}  // namespace
}  // namespace stoke::graph::test
