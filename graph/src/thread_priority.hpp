// LowerPriority: the calling thread runs a pipeline's work at a lower CPU priority
// (PipelineOptions::nice) and takes its own back afterwards (private header).
#pragma once

namespace stoke::graph::detail {

/// For its lifetime the calling thread runs at nice value `nice` (0: nothing changes); at its end
/// the thread takes back the value it had where that was higher in priority than `nice`, and else
/// `base` (the pipeline maker's own_nice()) where that is higher: a Linux thread begins at its
/// creator's value, so a oneTBB worker started by a lowered thread would otherwise keep it. Raising
/// priority needs root, CAP_SYS_NICE or RLIMIT_NICE (setpriority's EPERM otherwise: the thread
/// keeps the lower value). Nested scopes change nothing more than the outermost. Linux sets
/// priority per thread. Scoped per task, not per arena: a oneTBB task_scheduler_observer would do
/// it on arena entry and exit, but oneTBB 2021.8 loses the observer's proxy when a worker is
/// still in the arena as the observer goes (LeakSanitizer).
class LowerPriority {
 public:
  LowerPriority(int nice, int base) noexcept;
  ~LowerPriority();
  LowerPriority(const LowerPriority&) = delete;
  LowerPriority& operator=(const LowerPriority&) = delete;

 private:
  bool active_;  // nice > 0: counted in the thread's depth
};

/// The calling thread's nice value (Linux: its own, not the process's).
int thread_nice() noexcept;

/// The calling thread's nice value outside the LowerPriority scopes it is in.
int own_nice() noexcept;

}  // namespace stoke::graph::detail
