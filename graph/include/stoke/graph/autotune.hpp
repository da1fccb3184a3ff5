// Autotuner: the scheduler's policy. Fed the pipeline's cumulative stage stats at a regular
// interval, it finds the stage that limits throughput and decides where concurrency and the
// in-flight limit (the prefetch depth) should move, within a CPU and a memory budget. It only
// decides; being a pure function of the stats it is given, it is tested by feeding it synthetic
// stats. A Pipeline built with PipelineOptions::autotune runs one on a thread of its own and
// applies its decisions (Pipeline::set_concurrency, set_max_in_flight); by hand:
//
//   stoke::graph::Autotuner tuner({.target = "compute", .cpu_budget = 8});
//   every 200 ms:
//     for (const auto& d : tuner.observe(pipe.stats(), pipe.max_in_flight(), elapsed))
//       apply(d);   // and log d.why
//
// The policy, each interval, on measurements smoothed over intervals:
//   - the target (the compute stage) at work less than `saturated` of the time: the busiest
//     stage in front of it that is saturated and may grow gets one more call, while the cores in
//     use leave half a core for it (the CPU budget); if no stage in front is saturated, items are
//     held back by the in-flight limit: it grows (x2 while the target is idle half the time,
//     x1.5 after), up to the memory budget, unless the cores are all busy; if that bought
//     nothing, the busiest stage gets one more call anyway;
//   - the target saturated: a parallel stage using less than `idle` of its calls gives one back;
//   - a condition must hold `patience` intervals in a row; each move is judged two intervals
//     later on the pipeline's throughput (source items that left it: the finest count), and undone
//     if it bought less than `min_gain`, beyond what counting can resolve; an undone move is
//     barred for a while, longer after each failure, so the tuner does not oscillate between two
//     settings. A grow that bought nothing because another stage was as slow (its own stage no
//     longer saturated, the other now is) is kept and followed by a grow of that stage; the two
//     are judged, and undone, together.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "stoke/graph/decision.hpp"
#include "stoke/graph/options.hpp"
#include "stoke/graph/stats.hpp"

namespace stoke::graph {

/// What the tuner measured for a stage over the last interval, smoothed.
struct StageLoad {
  std::string name;
  StageKind kind = StageKind::map;
  double utilization = 0;  ///< busy / (interval x concurrency): 1 is every allowed call busy
  double starved = 0;      ///< share of the interval idle for want of input
  double blocked = 0;      ///< share of the interval idle for want of room downstream
  double rate = 0;         ///< items out per second
  int concurrency = 1;
  int min_concurrency = 1;
  int max_concurrency = 1;

  /// Cores it keeps busy: its busy calls (an async stage's operations run elsewhere: none).
  double cores() const noexcept { return kind == StageKind::async ? 0.0 : utilization * concurrency; }
  /// How much of the time it is at work: a stage with several calls counts by their use, an
  /// async stage (a device behind it) by the time any operation is outstanding.
  double working() const noexcept { return kind == StageKind::async ? 1.0 - starved : utilization; }
};

/// The cores this process may run on (its CPU affinity), at least 1.
int usable_cores() noexcept;
/// Memory the system could give this process now without swapping (MemAvailable), in bytes;
/// 0 when unknown.
std::size_t available_memory() noexcept;

class Autotuner {
 public:
  explicit Autotuner(AutotuneOptions options = {});

  /// Takes cumulative stats (Pipeline::stats()) at time `now` (monotonic, any origin) with the
  /// current in-flight limit and the items in flight now (Pipeline::in_flight()); returns the
  /// moves to apply now, in order. The first call only records a baseline.
  std::vector<Decision> observe(const std::vector<StageStats>& stats, std::size_t max_in_flight,
                                std::chrono::nanoseconds now, std::size_t in_flight = 0);

  /// The smoothed loads of the last observation, in pipeline order.
  const std::vector<StageLoad>& loads() const noexcept { return loads_; }
  /// Every decision so far.
  const std::vector<Decision>& history() const noexcept { return history_; }
  const AutotuneOptions& options() const noexcept { return options_; }
  /// The most items the tuner lets in flight: the least of the memory budget over item_bytes
  /// and AutotuneOptions::max_in_flight (SIZE_MAX when there is neither; before the first
  /// observation, which supplies the default cap).
  std::size_t in_flight_ceiling() const noexcept;
  /// Cores the non-async stages kept busy in the last interval, smoothed.
  double cores_in_use() const noexcept;

 private:
  struct Pending {  // a move waiting to show what it bought
    Decision decision;
    std::vector<Decision> chain;  // earlier grows it completes (a bottleneck shared by stages)
    double rate_before = 0;
    double items_before = 0;        // progress counted in the window before the move
    std::uint64_t progress_at = 0;  // progress when it was made
    std::chrono::nanoseconds made_at{0};
    int wait = 0;  // intervals left before judging it
  };
  struct Mark {  // progress at an observation
    std::chrono::nanoseconds at{0};
    std::uint64_t progress = 0;
  };

  void measure(const std::vector<StageStats>& stats, std::chrono::nanoseconds now);
  std::optional<Decision> propose(std::size_t max_in_flight) const;
  std::vector<Decision> judge(const Pending& pending);
  bool is_tabu(const Decision& d) const;
  Decision make(DecisionKind kind, const std::string& stage, std::size_t from, std::size_t to, std::string why) const;
  Decision one_more(const StageLoad& s, std::string why) const;
  Decision one_less(const StageLoad& s, std::string why) const;
  bool fits_budget(const StageLoad& s) const;
  std::size_t target_index() const noexcept;

  AutotuneOptions options_;
  std::vector<StageStats> previous_;
  std::chrono::nanoseconds previous_at_{0};
  std::chrono::nanoseconds now_{0};
  bool have_baseline_ = false;
  std::size_t default_cap_ = 0;  // the in-flight cap when the options give none
  std::vector<StageLoad> loads_;
  std::vector<Mark> marks_;  // the last few observations' progress, oldest first
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
