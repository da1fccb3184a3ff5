// PipelineOptions::nice: the stages' bodies run at the pipeline's lower CPU priority, the thread
// that runs the pipeline gets its own priority back afterwards, and 0 leaves priorities alone.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "stoke/graph/graph.hpp"

namespace stoke::graph::test {
namespace {

int thread_nice() {
  errno = 0;
  const int value = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
  EXPECT_EQ(errno, 0);
  return value;
}

// Whether this process may raise a thread's priority again (root, or RLIMIT_NICE letting it).
bool may_raise_priority(int to) {
  if (::geteuid() == 0) return true;
  rlimit limit{};
  return ::getrlimit(RLIMIT_NICE, &limit) == 0 && 20 - static_cast<int>(limit.rlim_cur) <= to;
}

// The nice values seen by every call of a parallel "work" stage over `items` items.
std::set<int> nice_values_in_stages(int nice, int items = 400) {
  std::mutex mutex;
  std::set<int> seen;
  Pipeline pipe{{.threads = 2, .nice = nice}};
  pipe.source("source", [next = 0, items]() mutable -> std::optional<int> {
        if (next == items) return std::nullopt;
        return next++;
      })
      .map("work",
           [&](int x) {
             const int value = thread_nice();
             const std::lock_guard lock(mutex);
             seen.insert(value);
             return x;
           },
           {.concurrency = parallel(2)})
      .sink("sink", [&](int) {
        const int value = thread_nice();
        const std::lock_guard lock(mutex);
        seen.insert(value);
      });
  pipe.run();
  return seen;
}

TEST(PipelinePriority, TheStagesRunAtThePipelinesNiceValue) {
  if (thread_nice() >= 7) GTEST_SKIP() << "this process already runs at nice " << thread_nice();
  EXPECT_EQ(nice_values_in_stages(7), std::set<int>{7});
}

TEST(PipelinePriority, TheThreadThatRanThePipelineGetsItsPriorityBack) {
  const int own = thread_nice();
  if (own >= 7) GTEST_SKIP() << "this process already runs at nice " << own;
  if (!may_raise_priority(own)) GTEST_SKIP() << "this process may not raise priority back to " << own;
  nice_values_in_stages(7);
  EXPECT_EQ(thread_nice(), own);
}

// A thread that begins at a lower priority than the pipeline's maker (as a oneTBB worker started by
// a lowered thread does: Linux threads begin at their creator's value) ends at the maker's.
TEST(PipelinePriority, AThreadThatBeganLowerGoesBackToTheMakersValue) {
  const int own = thread_nice();
  if (own >= 7) GTEST_SKIP() << "this process already runs at nice " << own;
  if (!may_raise_priority(own)) GTEST_SKIP() << "this process may not raise priority back to " << own;
  Pipeline pipe{{.threads = 2, .nice = 7}};  // made here, at `own`
  int count = 0;
  pipe.source("source", [next = 0]() mutable -> std::optional<int> {
        if (next == 50) return std::nullopt;
        return next++;
      })
      .sink("sink", [&](int) { ++count; });
  int after = -1;
  std::thread runner([&] {
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 7);
    pipe.run();
    after = thread_nice();
  });
  runner.join();
  EXPECT_EQ(count, 50);
  EXPECT_EQ(after, own);
}

// In a process of its own (ctest runs each test alone): a oneTBB worker that a lowered thread
// started begins at that thread's nice value, and a nice-0 pipeline would find it there.
TEST(PipelinePriority, NiceZeroLeavesTheThreadsAsTheyAre) {
  const int own = thread_nice();
  EXPECT_EQ(nice_values_in_stages(0), std::set<int>{own});
}

}  // namespace
}  // namespace stoke::graph::test
