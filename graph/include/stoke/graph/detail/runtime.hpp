// Runtime: the state one run shares between its stages (credits, stop/cancel, errors, trace).
#pragma once

#include <oneapi/tbb/task_group.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/graph/errors.hpp"
#include "stoke/graph/options.hpp"
#include "stoke/graph/stats.hpp"

namespace stoke::graph::detail {

class StageBase;

/// Signals counted by the SignalStop handler (defined in signal.cpp).
extern std::atomic<int> signal_count;

/// In-flight credits: the source takes one before producing an item; whoever ends the item's
/// life releases it (sink, filter drop, skip, cancel, an emit call that emitted nothing). A credit
/// is credit_unit units, so that a fan-out can split one item's credit between its branches (and
/// a join add the parts up again): the credit comes back whole once every part has.
/// Not thread-hostile: every member may be called from any task.
class Runtime {
 public:
  explicit Runtime(PipelineOptions options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  const PipelineOptions& options() const noexcept { return options_; }
  /// The most threads that run the pipeline's tasks at once (its arena's concurrency).
  int concurrency() const noexcept { return concurrency_; }
  /// Body calls shorter than this (20 us, in ticks) are timed by sampling (StageBase::begin_call).
  std::int64_t short_call_ticks() const noexcept { return short_call_ticks_; }

  // ---- credits --------------------------------------------------------------------------------
  /// True if a credit is free now; otherwise marks the source as waiting (so that the next
  /// release wakes it) and checks once more.
  bool credit_available_or_park() noexcept;
  /// Units per credit (a power of two: a fan-out into up to 2^16 branches still gives each a part).
  static constexpr std::uint32_t credit_unit = std::uint32_t{1} << 16;
  /// Takes a credit; call only after credit_available_or_park() said yes (only the source takes).
  void take_credit() noexcept { in_flight_.fetch_add(credit_unit, std::memory_order_relaxed); }
  /// Gives back `units` (credit_unit per whole item).
  void release_credits(std::uint64_t units) noexcept;
  void set_max_in_flight(std::size_t limit) noexcept;
  std::size_t max_in_flight() const noexcept { return max_in_flight_.load(std::memory_order_relaxed); }
  /// Source items alive (an item split by a fan-out counts until its last part is gone).
  std::size_t in_flight() const noexcept {
    return static_cast<std::size_t>((in_flight_.load(std::memory_order_relaxed) + credit_unit - 1) / credit_unit);
  }

  // ---- stop, cancel, failure ------------------------------------------------------------------
  bool stop_requested() const noexcept {
    return stop_.load(std::memory_order_relaxed) ||
           (options_.stop_on_signal && signal_count.load(std::memory_order_relaxed) - signal_base_ >= 1);
  }
  bool cancelled() const noexcept {
    return cancel_.load(std::memory_order_relaxed) ||
           (options_.stop_on_signal && signal_count.load(std::memory_order_relaxed) - signal_base_ >= 2);
  }
  void request_stop() noexcept { stop_.store(true); }
  /// The source ended because of stop() or cancel(), not at the end of its stream.
  void note_cut_short() noexcept { cut_short_.store(true); }
  bool cut_short() const noexcept { return cut_short_.load(); }
  /// Cancels the run, and wakes the gated stages (a parked one would not look at the flag).
  void cancel() noexcept;
  /// A stage with a gated body, to wake on cancel(); called by run() as the stages start, which
  /// a cancel() from another thread may overlap.
  void add_gated(StageBase* stage);
  /// Records the first failure and cancels the run.
  void fail(StageError error);
  void record_skip(std::string_view stage, std::uint64_t index, std::string reason);

  /// The stall watchdog runs (PipelineOptions::stall): body calls mark themselves.
  bool watching() const noexcept { return options_.stall.limit.count() > 0; }

  // ---- trace ----------------------------------------------------------------------------------
  bool tracing() const noexcept { return options_.trace; }
  /// begin/end in ticks (clock.hpp).
  void record_span(int stage, std::uint64_t index, std::int64_t begin, std::int64_t end);
  void write_trace(const std::string& path, const std::vector<std::string>& stage_names) const;
  /// A scheduler's move, for the trace (an instant event and a counter step).
  void record_decision(const Decision& decision);
  /// A setting's value at `at_ns` from the start (`stage` empty: the in-flight limit), for the
  /// trace's counters.
  void record_setting(std::string stage, std::size_t value, std::int64_t at_ns);

  // ---- execution ------------------------------------------------------------------------------
  void set_source(StageBase* source) noexcept { source_ = source; }
  /// Runs `body` inside the pipeline's task arena, then waits for every task of the run.
  void execute_and_wait(const std::function<void()>& body);
  /// Starts `tasks` tasks that each call stage.run_task(), in the pipeline's arena: spawned onto
  /// this thread's deque when it runs one of the pipeline's tasks (the task it will pick up next,
  /// as oneTBB's own pipelines do), otherwise enqueued into the arena. Any thread.
  void spawn(StageBase& stage, int tasks);
  /// Keeps the run from ending while an operation outside its tasks (an async stage's) is
  /// outstanding: the run waits until the returned handle is destroyed. Any thread.
  [[nodiscard]] tbb::task_handle hold();

  void begin() noexcept;
  std::int64_t started_ticks() const noexcept { return started_ticks_; }
  void rethrow_failure() const;
  std::uint64_t skipped() const noexcept { return skipped_.load(); }
  std::vector<SkippedItem> skipped_items() const;

 private:
  struct Impl;
  // Read by every item in every stage, written rarely:
  PipelineOptions options_;
  std::unique_ptr<Impl> impl_;
  StageBase* source_ = nullptr;
  std::vector<StageBase*> gated_;  // under impl_->mutex
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_{false};
  std::atomic<bool> cut_short_{false};
  int signal_base_ = 0;
  int concurrency_ = 1;
  std::int64_t short_call_ticks_ = 0;
  std::int64_t started_ticks_ = 0;
  // Written by every item (taken and given back on different threads): a cache line apart.
  alignas(64) std::atomic<std::uint64_t> in_flight_{0};  // credit units
  std::atomic<std::size_t> max_in_flight_;
  std::atomic<bool> source_waiting_{false};
  alignas(64) std::atomic<std::uint64_t> skipped_{0};
};

}  // namespace stoke::graph::detail
