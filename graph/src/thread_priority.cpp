#include "thread_priority.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace stoke::graph::detail {

namespace {

// On Linux PRIO_PROCESS with a thread id sets that thread alone (sched(7), "The nice value").
id_t this_thread() noexcept { return static_cast<id_t>(::syscall(SYS_gettid)); }

// What a thread had before the arenas it is in lowered it. A thread can be in several arenas at
// once (a task of one calling execute() of another); only the outermost change is given back.
struct Lowered {
  int depth = 0;
  bool changed = false;
  int own = 0;
};
thread_local Lowered lowered;

}  // namespace

int thread_nice() noexcept {
  errno = 0;
  const int value = ::getpriority(PRIO_PROCESS, this_thread());
  return errno == 0 ? value : 0;
}

ArenaPriority::ArenaPriority(tbb::task_arena& arena, int nice)
    : tbb::task_scheduler_observer(arena), nice_(std::clamp(nice, 0, 19)) {
  observe(true);
}

ArenaPriority::~ArenaPriority() { observe(false); }

void ArenaPriority::on_scheduler_entry(bool /*is_worker*/) {
  if (lowered.depth++ > 0) return;
  lowered.own = thread_nice();
  lowered.changed = lowered.own < nice_ && ::setpriority(PRIO_PROCESS, this_thread(), nice_) == 0;
}

void ArenaPriority::on_scheduler_exit(bool /*is_worker*/) {
  if (lowered.depth == 0 || --lowered.depth > 0) return;
  if (lowered.changed) ::setpriority(PRIO_PROCESS, this_thread(), lowered.own);  // EPERM: keeps nice_
  lowered.changed = false;
}

}  // namespace stoke::graph::detail
