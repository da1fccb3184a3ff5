// Async stages: bodies that start work elsewhere and resolve a Completion later, from another
// thread (as a GPU stream's completion does).
#include <gtest/gtest.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

/// A stand-in for a device: one thread that runs submitted jobs in order, each after a delay,
/// outside the pipeline's threads.
class FakeDevice {
 public:
  explicit FakeDevice(std::chrono::microseconds delay = std::chrono::microseconds(200)) : delay_(delay) {
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeDevice() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  /// Runs `job()` later on the device thread. Jobs may be move-only (they hold Completions).
  template <class F>
  void submit(F job) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::make_unique<Job<F>>(std::move(job)));
    }
    cv_.notify_all();
  }
  std::thread::id thread_id() const { return thread_.get_id(); }

 private:
  struct AnyJob {
    virtual ~AnyJob() = default;
    virtual void run() = 0;
  };
  template <class F>
  struct Job final : AnyJob {
    explicit Job(F f) : fn(std::move(f)) {}
    void run() override { fn(); }
    F fn;
  };

  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      std::this_thread::sleep_for(delay_);
      job->run();
      job.reset();
      lock.lock();
    }
  }

  std::chrono::microseconds delay_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<AnyJob>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

std::function<std::optional<int>()> count_to(int n) {
  return [i = 0, n]() mutable -> std::optional<int> { return i < n ? std::optional(i++) : std::nullopt; };
}

TEST(PipelineAsync, CompletionsFromAnotherThreadReachTheSinkInOrder) {
  FakeDevice device;
  std::vector<int> seen;
  std::atomic<int> resolved_off_pipeline{0};
  Pipeline pipe({.threads = 2});
  pipe.source("count", count_to(200))
      .async<int>(
          "device",
          [&](int x, Completion<int> done) {
            device.submit([&, x, done = std::move(done)]() mutable {
              if (std::this_thread::get_id() == device.thread_id()) ++resolved_off_pipeline;
              done(x * 2);
            });
          },
          {.concurrency = parallel(4), .ordered = true})
      .sink("collect", [&](int x) { seen.push_back(x); }, {.ordered = true});
  const RunReport report = pipe.run();
  ASSERT_EQ(seen.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], 2 * i);
  EXPECT_EQ(resolved_off_pipeline.load(), 200);
  const StageStats& async = stage_named(report.stages, "device");
  EXPECT_EQ(async.kind, StageKind::async);
  EXPECT_EQ(async.items_out, 200u);
  EXPECT_GT(async.busy.count(), 0);
}

TEST(PipelineAsync, ConcurrencyBoundsTheOperationsOutstanding) {
  FakeDevice device(std::chrono::microseconds(500));
  std::atomic<int> outstanding{0};
  std::atomic<int> peak{0};
  Pipeline pipe({.threads = 4});
  pipe.source("count", count_to(60))
      .async<int>(
          "device",
          [&](int x, Completion<int> done) {
            const int now = ++outstanding;
            int seen = peak.load();
            while (now > seen && !peak.compare_exchange_weak(seen, now)) {
            }
            device.submit([&, x, done = std::move(done)]() mutable {
              --outstanding;
              done(x);
            });
          },
          {.concurrency = parallel(3)})
      .sink("drain", [](int) {});
  const RunReport report = pipe.run();
  EXPECT_EQ(report.consumed, 60u);
  EXPECT_LE(peak.load(), 3);
  EXPECT_GE(peak.load(), 2) << "operations should overlap";
}

TEST(PipelineAsync, NoPipelineThreadWaitsForAnOperation) {
  // One pipeline thread: if it blocked on an operation, the device thread's completions could
  // never re-enter the graph and the run would not end.
  FakeDevice device;
  Pipeline pipe({.threads = 1});
  std::atomic<int> consumed{0};
  pipe.source("count", count_to(50))
      .async<int>(
          "device", [&](int x, Completion<int> done) { device.submit([x, d = std::move(done)]() mutable { d(x); }); },
          {.concurrency = parallel(2)})
      .sink("drain", [&](int) { ++consumed; });
  pipe.run();
  EXPECT_EQ(consumed.load(), 50);
}

TEST(PipelineAsync, ResolvingInsideTheBodyWorks) {
  std::vector<int> seen;
  Pipeline pipe;
  pipe.source("count", count_to(20))
      .async<int>("now", [](int x, Completion<int> done) { done(x + 1); })
      .sink("collect", [&](int x) { seen.push_back(x); });
  pipe.run();
  ASSERT_EQ(seen.size(), 20u);
  EXPECT_EQ(seen.front(), 1);
  EXPECT_EQ(seen.back(), 20);
}

TEST(PipelineAsync, DropLeavesAHoleThatOrderedStagesSkip) {
  FakeDevice device;
  std::vector<int> seen;
  Pipeline pipe({.threads = 2});
  pipe.source("count", count_to(100))
      .async<int>(
          "odd",
          [&](int x, Completion<int> done) {
            device.submit([x, d = std::move(done)]() mutable {
              if (x % 2)
                d(x);
              else
                d.drop();
            });
          },
          {.concurrency = parallel(4), .ordered = true})
      .sink("collect", [&](int x) { seen.push_back(x); }, {.ordered = true});
  const RunReport report = pipe.run();
  ASSERT_EQ(seen.size(), 50u);
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], static_cast<int>(2 * i + 1));
  EXPECT_EQ(stage_named(report.stages, "odd").dropped, 50u);
}

TEST(PipelineAsync, FailedOperationsAreSkippedAndListedUnderSkip) {
  FakeDevice device;
  Pipeline pipe({.threads = 2});
  pipe.source("count", count_to(30))
      .async<int>(
          "device",
          [&](int x, Completion<int> done) {
            device.submit([x, d = std::move(done)]() mutable {
              if (x == 7)
                d.fail(std::make_exception_ptr(InjectedFailure("device said no")));
              else
                d(x);
            });
          },
          {.concurrency = parallel(2), .on_error = OnError::skip})
      .sink("drain", [](int) {});
  const RunReport report = pipe.run();
  EXPECT_EQ(report.consumed, 29u);
  ASSERT_EQ(report.skipped_items.size(), 1u);
  EXPECT_EQ(report.skipped_items[0].stage, "device");
  EXPECT_EQ(report.skipped_items[0].index, 7u);
  EXPECT_TRUE(contains(report.skipped_items[0].reason, "device said no"));
}

TEST(PipelineAsync, AFailedOperationFailsTheRunNamingTheStage) {
  FakeDevice device;
  Pipeline pipe({.threads = 2});
  pipe.source("count", count_to(1000))
      .async<int>(
          "device",
          [&](int x, Completion<int> done) {
            device.submit([x, d = std::move(done)]() mutable {
              if (x == 5)
                d.fail(std::make_exception_ptr(InjectedFailure("out of memory")));
              else
                d(x);
            });
          },
          {.concurrency = parallel(2)})
      .sink("drain", [](int) {});
  try {
    pipe.run();
    FAIL() << "expected a StageError";
  } catch (const StageError& error) {
    EXPECT_EQ(error.stage(), "device");
    EXPECT_EQ(error.index(), 5u);
    EXPECT_TRUE(contains(error.what(), "out of memory"));
  }
}

TEST(PipelineAsync, AnAbandonedCompletionFailsItsItem) {
  Pipeline pipe;
  pipe.source("count", count_to(10))
      .async<int>("forgetful", [](int x, Completion<int> done) {
        if (x != 3) done(x);
      })  // item 3's Completion is destroyed unresolved
      .sink("drain", [](int) {});
  try {
    pipe.run();
    FAIL() << "expected a StageError";
  } catch (const StageError& error) {
    EXPECT_EQ(error.stage(), "forgetful");
    EXPECT_EQ(error.index(), 3u);
    EXPECT_TRUE(contains(error.what(), "abandoned"));
  }
}

TEST(PipelineAsync, ABodyThatThrowsFailsWithItsOwnException) {
  Pipeline pipe;
  pipe.source("count", count_to(10))
      .async<int>(
          "throws",
          [](int x, Completion<int> done) {
            if (x == 4) throw InjectedFailure("no device buffer");
            done(x);
          },
          {.on_error = OnError::skip})
      .sink("drain", [](int) {});
  const RunReport report = pipe.run();
  EXPECT_EQ(report.consumed, 9u);
  ASSERT_EQ(report.skipped_items.size(), 1u);
  EXPECT_EQ(report.skipped_items[0].index, 4u);
  EXPECT_TRUE(contains(report.skipped_items[0].reason, "no device buffer"));
}

TEST(PipelineAsync, ResolvingTwiceIsALogicError) {
  std::atomic<int> logic_errors{0};
  Pipeline pipe;
  pipe.source("count", count_to(3))
      .async<int>("twice",
                  [&](int x, Completion<int> done) {
                    done(x);
                    try {
                      done(x);
                    } catch (const std::logic_error&) {
                      ++logic_errors;
                    }
                  })
      .sink("drain", [](int) {});
  const RunReport report = pipe.run();
  EXPECT_EQ(report.consumed, 3u);
  EXPECT_EQ(logic_errors.load(), 3);
}

TEST(PipelineAsync, CancelWaitsForOutstandingOperationsAndDestroysEveryItem) {
  LiveCounter live;
  FakeDevice device(std::chrono::microseconds(300));
  Pipeline pipe({.max_in_flight = 16, .threads = 2});
  std::atomic<int> consumed{0};
  pipe.source("count", [&, i = std::uint64_t{0}]() mutable -> std::optional<Tracked> {
        return Tracked(live, i++);  // endless
      })
      .async<Tracked>(
          "device",
          [&](Tracked t, Completion<Tracked> done) {
            device.submit([t = std::move(t), d = std::move(done)]() mutable { d(std::move(t)); });
          },
          {.concurrency = parallel(4)})
      .sink("drain", [&](Tracked) {
        if (++consumed == 40) pipe.cancel();
      });
  const RunReport report = pipe.run();
  EXPECT_TRUE(report.cancelled);
  EXPECT_EQ(live.live(), 0) << "every item, including those resolved after the cancel, is destroyed";
  EXPECT_LE(live.peak(), 16);
}

TEST(PipelineAsync, StopDrainsOutstandingOperations) {
  FakeDevice device;
  Pipeline pipe({.threads = 2});
  std::atomic<std::uint64_t> consumed{0};
  pipe.source("count", [i = 0]() mutable -> std::optional<int> { return i++; })
      .async<int>(
          "device", [&](int x, Completion<int> done) { device.submit([x, d = std::move(done)]() mutable { d(x); }); },
          {.concurrency = parallel(4)})
      .sink("drain", [&](int) {
        if (++consumed == 25) pipe.stop();
      });
  const RunReport report = pipe.run();
  EXPECT_TRUE(report.stopped);
  EXPECT_EQ(report.consumed, report.produced) << "a stop lets every produced item through";
}

TEST(PipelineAsync, AnIdleDeviceStageCountsAsStarved) {
  // The source is slow, the device fast: the async stage spends most of the run with nothing
  // outstanding and nothing queued, which is what the scheduler reads as a starving GPU. 10 ms
  // an item: under ASan beside another test on 2 cores, the device's thread took ~2 ms to
  // complete a 50 us operation, and a 2 ms source then left the stage no idle time (CI, 9021b62).
  FakeDevice device(std::chrono::microseconds(50));
  Pipeline pipe({.threads = 2});
  pipe.source("slow", [i = 0]() mutable -> std::optional<int> {
        sleep_us(10'000);
        return i < 20 ? std::optional(i++) : std::nullopt;
      })
      .async<int>("device", [&](int x, Completion<int> done) {
        device.submit([x, d = std::move(done)]() mutable { d(x); });
      })
      .sink("drain", [](int) {});
  const RunReport report = pipe.run();
  const StageStats& async = stage_named(report.stages, "device");
  EXPECT_GT(async.starved, async.busy) << "starved " << async.starved.count() << " ns, busy " << async.busy.count();
}

}  // namespace
}  // namespace stoke::graph::test
