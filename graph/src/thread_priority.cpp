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

// What a thread had before the LowerPriority scopes it is in lowered it. A thread can be in several
// at once (a task of one pipeline running another); only the outermost change is given back.
struct Lowered {
  int depth = 0;
  bool changed = false;
  int own = 0;    // at the outermost scope's start
  int after = 0;  // what the outermost scope's end sets
};
thread_local Lowered lowered;

}  // namespace

int thread_nice() noexcept {
  errno = 0;
  const int value = ::getpriority(PRIO_PROCESS, this_thread());
  return errno == 0 ? value : 0;
}

int own_nice() noexcept { return lowered.depth > 0 ? lowered.own : thread_nice(); }

LowerPriority::LowerPriority(int nice, int base) noexcept : active_(nice > 0) {
  if (!active_ || lowered.depth++ > 0) return;
  nice = std::min(nice, 19);
  lowered.own = thread_nice();
  lowered.after = lowered.own < nice ? lowered.own : std::min(lowered.own, base);
  if (lowered.own != nice) ::setpriority(PRIO_PROCESS, this_thread(), nice);  // EPERM when raising: stays lower
  lowered.changed = lowered.own != nice || lowered.after != lowered.own;
}

LowerPriority::~LowerPriority() {
  if (!active_ || --lowered.depth > 0) return;
  if (lowered.changed) ::setpriority(PRIO_PROCESS, this_thread(), lowered.after);  // EPERM: keeps the lower one
  lowered.changed = false;
}

}  // namespace stoke::graph::detail
