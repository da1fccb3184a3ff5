// What every harness of stoke::bench measures with: the median of repeated measurements, and a
// pipeline run for a time limit with a side thread that samples it at a fixed period.
#pragma once

#include <chrono>
#include <functional>
#include <stoke/graph/pipeline.hpp>
#include <vector>

namespace stoke::bench {

using Clock = std::chrono::steady_clock;

/// The middle value (the mean of the two middle ones for an even count); 0 for none. What the
/// benchmarks compare: a run disturbed by other work on a shared machine then counts once,
/// however far off it is.
double median(std::vector<double> values);

/// Seconds from `from` to `to`.
double seconds_between(Clock::time_point from, Clock::time_point to);

/// What run_timed() gives back.
struct TimedRun {
  graph::RunReport report{};
  Clock::time_point start{};  ///< just before Pipeline::run() was called
  double seconds = 0;         ///< run()'s whole wall time
};

/// Called on run_timed()'s side thread with the seconds since the start.
using Tick = std::function<void(double seconds)>;

/// Runs `pipe` (built, not yet run) to the end of its stream, or, when `seconds` > 0, until that
/// time has passed and Pipeline::stop() has drained it (the items in flight finish). Meanwhile a
/// side thread calls `tick` every `period` (from the start: at period, 2 x period, ...) and once
/// more at the time limit, just before stopping; `tick` runs concurrently with the pipeline's
/// stages. Rethrows run()'s exception once the side thread has ended.
TimedRun run_timed(graph::Pipeline& pipe, double seconds, std::chrono::milliseconds period, const Tick& tick = {});

}  // namespace stoke::bench
