// Options for stages and pipelines.
#pragma once

#include <cstddef>
#include <string>

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
};

}  // namespace stoke::graph
