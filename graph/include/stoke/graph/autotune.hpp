// Autotuner: the scheduler's policy. Fed the pipeline's cumulative stage stats at a regular
// interval, it finds the stage that limits throughput and decides where concurrency and the
// in-flight limit (the prefetch depth) should move, within a CPU and a memory budget. It only
// decides: whoever owns the Pipeline applies the decisions (Pipeline::set_concurrency,
// set_max_in_flight). Being a pure function of the stats it is given, it is tested by feeding it
// synthetic stats.
//
//   stoke::graph::Autotuner tuner({.cpu_budget = 8});
//   every 200 ms:
//     for (const auto& d : tuner.observe(pipe.stats(), pipe.max_in_flight(), elapsed))
//       apply(d);   // and log d.why
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stoke/graph/stats.hpp"

namespace stoke::graph {

struct AutotuneOptions {
  /// The stage to keep saturated (the compute stage); empty: the last stage (the sink).
  std::string target;
  /// Threads the parallel stages may use together (the sum of their concurrency limits).
  /// 0: the cores this process may use.
  int cpu_budget = 0;
  /// Upper bound on PipelineOptions::max_in_flight from memory: memory_budget / item_bytes.
  /// 0 (either): no memory bound here.
  std::size_t memory_budget = 0;
  std::size_t item_bytes = 0;
  /// Weight of the newest interval in the smoothed measurements (exponential moving average).
  double smoothing = 0.5;
  /// Consecutive intervals a condition must hold before the tuner acts on it.
  int patience = 2;
  /// A stage busier than this share of its concurrency is saturated.
  double saturated = 0.95;
  /// A parallel stage busy less than this share has threads to give back.
  double idle = 0.5;
  /// A move must raise the target's rate by this share (a move that gives threads back: not lower
  /// it by more), or it is undone and not tried again for `tabu_intervals` intervals, twice as
  /// long after each further failure.
  double min_gain = 0.03;
  int tabu_intervals = 20;
};

enum class DecisionKind {
  grow,            ///< a stage gets one more concurrent call
  shrink,          ///< a stage gives one back
  grow_in_flight,  ///< more items (and so batches) in flight
  shrink_in_flight,
};
const char* to_string(DecisionKind kind) noexcept;

/// One move, with its reason. `stage` is empty for the in-flight limit.
struct Decision {
  DecisionKind kind = DecisionKind::grow;
  std::string stage;
  std::size_t from = 0;
  std::size_t to = 0;
  std::string why;
  std::chrono::nanoseconds at{0};  ///< the `now` of the observation that made it
  bool revert = false;             ///< undoes an earlier move that bought nothing
};

/// What the tuner measured for a stage over the last interval, smoothed.
struct StageLoad {
  std::string name;
  double utilization = 0;  ///< busy / (interval x concurrency): 1 is every allowed call busy
  double starved = 0;      ///< share of the interval idle for want of input
  double blocked = 0;      ///< share of the interval idle for want of room downstream
  double rate = 0;         ///< items out per second
  int concurrency = 1;
  int min_concurrency = 1;
  int max_concurrency = 1;
};

class Autotuner {
 public:
  explicit Autotuner(AutotuneOptions options = {});

  /// Takes cumulative stats (Pipeline::stats()) at time `now` (monotonic, any origin) with the
  /// current in-flight limit; returns the moves to apply now, in order. The first call only
  /// records a baseline.
  std::vector<Decision> observe(const std::vector<StageStats>& stats, std::size_t max_in_flight,
                                std::chrono::nanoseconds now);

  /// The smoothed loads of the last observation, in pipeline order.
  const std::vector<StageLoad>& loads() const noexcept { return loads_; }
  /// Every decision so far.
  const std::vector<Decision>& history() const noexcept { return history_; }
  const AutotuneOptions& options() const noexcept { return options_; }
  /// The in-flight ceiling from the memory budget (SIZE_MAX when there is none).
  std::size_t in_flight_ceiling() const noexcept;

 private:
  struct Pending {  // a move waiting to show what it bought
    Decision decision;
    double rate_before = 0;
    int wait = 0;  // intervals left before judging it
  };

  void measure(const std::vector<StageStats>& stats, std::chrono::nanoseconds now);
  std::optional<Decision> propose(std::size_t max_in_flight) const;
  bool is_tabu(const Decision& d) const;
  Decision make(DecisionKind kind, const std::string& stage, std::size_t from, std::size_t to, std::string why) const;
  int threads_in_use() const;
  double sink_rate() const;

  AutotuneOptions options_;
  std::vector<StageStats> previous_;
  std::chrono::nanoseconds previous_at_{0};
  std::chrono::nanoseconds now_{0};
  bool have_baseline_ = false;
  std::vector<StageLoad> loads_;
  std::vector<Decision> history_;
  std::optional<Pending> pending_;
  std::string streak_key_;  // the proposal seen on consecutive intervals
  int streak_ = 0;
  int cooldown_ = 0;
  int interval_ = 0;
  std::map<std::string, int> tabu_until_;  // move key -> interval number it is allowed again
  std::map<std::string, int> failures_;    // move key -> times it was undone
};

}  // namespace stoke::graph
