#include <oneapi/tbb/task.h>
#include <oneapi/tbb/task_arena.h>

#include <atomic>

#include "internal.hpp"
#include "stoke/gpu/stream.hpp"

namespace stoke::gpu {

namespace {
std::atomic<std::uint64_t> pipeline_thread_waits{0};
}  // namespace

void detail::note_host_wait() noexcept {
  // An arena slot alone does not make a pipeline worker: a thread that once called into oneTBB
  // keeps one (an EventWatcher thread does, resolving completions). Count the wait only while the
  // thread runs a oneTBB task, i.e. a stage body (current_context() is null outside tasks; the
  // first check keeps it from attaching a thread that never used oneTBB).
  if (tbb::this_task_arena::current_thread_index() == tbb::task_arena::not_initialized) return;
  if (tbb::task::current_context() != nullptr) pipeline_thread_waits.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t host_waits_on_pipeline_threads() noexcept { return pipeline_thread_waits.load(); }

}  // namespace stoke::gpu
