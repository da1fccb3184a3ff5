#include <oneapi/tbb/task_arena.h>

#include <atomic>

#include "internal.hpp"
#include "stoke/gpu/stream.hpp"

namespace stoke::gpu {

namespace {
std::atomic<std::uint64_t> pipeline_thread_waits{0};
}  // namespace

void detail::note_host_wait() noexcept {
  if (tbb::this_task_arena::current_thread_index() != tbb::task_arena::not_initialized)
    pipeline_thread_waits.fetch_add(1, std::memory_order_relaxed);
}

std::uint64_t host_waits_on_pipeline_threads() noexcept { return pipeline_thread_waits.load(); }

}  // namespace stoke::gpu
