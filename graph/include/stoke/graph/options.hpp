// Options for stages and pipelines.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "stoke/graph/decision.hpp"

namespace stoke::graph {

/// How many calls of a stage's body may run at once. `initial` is where a run starts; the
/// scheduler (or Pipeline::set_concurrency) may move it anywhere in [min, max] while it runs.
struct Concurrency {
  int min = 1;
  int max = 1;
  int initial = 1;
};

/// One call at a time.
constexpr Concurrency serial() noexcept { return {1, 1, 1}; }
/// Up to `max` concurrent calls, starting at `max`.
constexpr Concurrency parallel(int max) noexcept { return {1, max, max}; }
/// Up to `max` concurrent calls, at least `min`, starting at `initial`.
constexpr Concurrency parallel(int min, int max, int initial) noexcept { return {min, max, initial}; }

/// What a stage does when its body throws.
enum class OnError {
  fail,  ///< cancel the run; Pipeline::run() rethrows as StageError naming the stage and item
  skip,  ///< drop the item, count it and list it in RunReport::skipped_items; the run goes on
};

struct StageOptions {
  Concurrency concurrency = serial();
  /// Deliver this stage's outputs in source order (a serial stage also *processes* its inputs
  /// in source order, which is what a stateful stage such as a batcher wants).
  bool ordered = false;
  OnError on_error = OnError::fail;
  /// Bound on items waiting in this stage's input buffer; an upstream stage does not start new
  /// items while it is full. 0 picks 2 * concurrency.max + 2.
  std::size_t capacity = 0;
};

/// A join's settings (see graph::join).
struct JoinOptions {
  /// A join whose branches dropped this many positions in a row, before any was joined, can
  /// never complete (a branch filters or skips everything): the run fails naming the join. A join
  /// that joined nothing by the end of its input fails too. 0: only at the end.
  std::size_t starve_after = 1024;
  /// Bound on each branch's items waiting in front of the join (as StageOptions::capacity).
  std::size_t capacity = 0;
};

/// The scheduler's settings (see autotune.hpp). Every field has a usable default.
struct AutotuneOptions {
  /// The stage to keep saturated (the compute stage); empty: the last stage (the sink).
  std::string target{};
  /// Cores the stages may keep busy together, measured (busy time, async stages excepted: their
  /// operations run elsewhere). A stage grows only while half a core more would still fit.
  /// 0: the cores this process may run on.
  int cpu_budget = 0;
  /// Upper bound on max_in_flight from memory: memory_budget / item_bytes. memory_budget 0: a
  /// quarter of the memory available when the run starts; item_bytes 0: no memory bound.
  std::size_t memory_budget = 0;
  std::size_t item_bytes = 0;
  /// Upper bound on max_in_flight whatever the memory (0: none but the memory bound; with no
  /// memory bound either, 16 x the starting limit).
  std::size_t max_in_flight = 0;
  /// Time between two looks at the stats.
  std::chrono::milliseconds interval{200};
  /// Weight of the newest interval in the smoothed measurements (exponential moving average).
  double smoothing = 0.5;
  /// Consecutive intervals a condition must hold before the tuner acts on it.
  int patience = 2;
  /// A stage busier than this share of its concurrency is saturated (a bottleneck seldom reads
  /// 100%: its calls wait for a thread between items).
  double saturated = 0.9;
  /// A parallel stage busy less than this share has threads to give back.
  double idle = 0.5;
  /// A move must raise the target's rate by this share (a move that gives threads or memory
  /// back: not lower it by more), or it is undone and not tried again for `tabu_intervals`
  /// intervals, twice as long after each further failure.
  double min_gain = 0.03;
  int tabu_intervals = 20;
  /// Called on the scheduler's thread with each decision as it is applied (to log it).
  std::function<void(const Decision&)> on_decision{};
};

/// What the stall watchdog does about a body call that runs past StallOptions::limit.
enum class OnStall {
  warn,  ///< report it (StallOptions::on_stall, RunReport::stalls); the run goes on
  fail,  ///< report it and cancel the run: Pipeline::run() throws a StageError whose cause() is a
         ///< StallError once the call returns. A call that has not returned StallOptions::grace
         ///< after that ends the process (exit status stall_exit_status, the report on stderr): a
         ///< thread stuck in a body cannot be abandoned while its item lives on its stack.
};

/// Exit status of a process ended by OnStall::fail (EX_SOFTWARE).
inline constexpr int stall_exit_status = 70;

struct Stall;

/// The stall watchdog: a thread that looks, every limit / 4, at the body call each of the
/// pipeline's threads is in (a stage's item, or a source producing one) and reports each call
/// running longer than `limit` once, with the stage, the item's source index and its name. It
/// sees the calls of the first 63 threads that ran any pipeline's tasks (every thread of an arena
/// of that size); an async stage's operations, which run outside the calls, are not watched.
struct StallOptions {
  /// 0: no watchdog (and no cost: the calls are marked only when it runs).
  std::chrono::milliseconds limit{0};
  OnStall policy = OnStall::warn;
  /// OnStall::fail: how long the stalled call may take to return once the run was failed before
  /// the process ends. 0: `limit`.
  std::chrono::milliseconds grace{0};
  /// The name of the item with a source index (a file path), for the report; called on the
  /// watchdog's thread, only when a stall is reported. Empty: none.
  std::function<std::string(std::uint64_t index)> item_name{};
  /// Called on the watchdog's thread with each stall as it is found (to log it). Empty: a line
  /// on stderr, "stoke: stage 'decode' has been on item 17 (photos/a.jpg) for 12.0 s (...)".
  std::function<void(const Stall&)> on_stall{};
};

struct PipelineOptions {
  /// Source items alive in the graph at once, end to end (the source waits for a credit before
  /// producing). This is the hard memory bound; it can be changed while running.
  std::size_t max_in_flight = 256;
  /// Threads of the pipeline's task arena. 0: oneTBB's default (one per core).
  int threads = 0;
  /// Stop on SIGINT/SIGTERM: the first signal drains (the source stops, items in flight finish),
  /// the second cancels. Needs a live stoke::graph::SignalStop guard to install the handler.
  bool stop_on_signal = false;
  /// Record one span per body call, to be written with Pipeline::write_trace().
  bool trace = false;
  std::size_t max_trace_spans = std::size_t{1} << 20;
  /// Skipped items listed in the report (all are counted).
  std::size_t max_listed_skips = 10000;
  /// Let the scheduler move the parallel stages' concurrency (within their [min, max]) and
  /// max_in_flight while the pipeline runs. nullopt: the static settings stay as given.
  std::optional<AutotuneOptions> autotune{};
  /// Report (or fail on) a body call that runs too long: see StallOptions. Off by default.
  StallOptions stall{};
  /// Run the pipeline's work at a lower CPU priority: the Linux nice value (1..19) of every thread
  /// while it runs one of the pipeline's tasks; 0 leaves the threads as they are. For a pipeline
  /// that feeds a consumer computing on the same cores (a model training on the CPU): the
  /// consumer's threads win a core whenever they can run, the stages take the time they leave,
  /// and when the consumer waits for an item it sleeps and the stages have the cores. A thread
  /// gets its own value back after each task (or the pipeline maker's, when that is higher: a
  /// Linux thread begins at its creator's value, so a oneTBB worker that a lowered thread started
  /// would keep the lower one) where the process may raise priority again (root, CAP_SYS_NICE or
  /// RLIMIT_NICE); elsewhere oneTBB's workers keep the lower one, and run other arenas' work at it.
  int nice = 0;
};

}  // namespace stoke::graph
