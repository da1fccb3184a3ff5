// ArenaPriority: the threads working in one task arena run at a lower CPU priority
// (PipelineOptions::nice), given back as they leave it (private header).
#pragma once

#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_scheduler_observer.h>

namespace stoke::graph::detail {

/// Observes `arena` from construction to destruction: a thread entering it takes nice value `nice`
/// (when its own is lower), and leaving it takes its own back where the process may raise priority
/// (setpriority's EPERM otherwise: the thread keeps `nice`). Linux sets priority per thread.
class ArenaPriority final : public tbb::task_scheduler_observer {
 public:
  ArenaPriority(tbb::task_arena& arena, int nice);
  ~ArenaPriority() override;
  ArenaPriority(const ArenaPriority&) = delete;
  ArenaPriority& operator=(const ArenaPriority&) = delete;

  void on_scheduler_entry(bool is_worker) override;
  void on_scheduler_exit(bool is_worker) override;

 private:
  int nice_;
};

/// The calling thread's nice value (Linux: its own, not the process's).
int thread_nice() noexcept;

}  // namespace stoke::graph::detail
