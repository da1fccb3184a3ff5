// Per-stage statistics and the report of a run.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "stoke/graph/decision.hpp"

namespace stoke::graph {

/// fan_out: copies each item into several branches; join: one input of a join (pairs the items of
/// one source position from several branches).
enum class StageKind { source, map, filter, emit, async, sink, fan_out, join };
const char* to_string(StageKind kind) noexcept;

/// A snapshot of one stage. Times are wall-clock, summed over the stage's lifetime so far.
struct StageStats {
  std::string name;
  StageKind kind = StageKind::map;
  std::uint64_t items_in = 0;           ///< items accepted into the input buffer (sources: 0)
  std::uint64_t items_out = 0;          ///< items handed downstream (sinks: items consumed)
  std::uint64_t dropped = 0;            ///< filter returned nullopt / emit emitted nothing
  std::uint64_t skipped = 0;            ///< body threw under OnError::skip
  std::chrono::nanoseconds busy{0};     ///< time inside the body, summed over concurrent calls
  std::chrono::nanoseconds starved{0};  ///< idle with an empty input buffer, waiting for input
  std::chrono::nanoseconds blocked{0};  ///< idle with input, waiting for room downstream (or, for
                                        ///< a source, for an in-flight credit)
  int concurrency = 1;                  ///< current limit on concurrent calls
  int min_concurrency = 1;
  int max_concurrency = 1;
  int active = 0;          ///< calls running now
  std::size_t queued = 0;  ///< items waiting in the input buffer, reorder buffer included
  std::size_t peak_queued = 0;
  std::size_t capacity = 0;  ///< input buffer bound
};

struct SkippedItem {
  std::string stage;
  std::uint64_t index = 0;
  std::string reason;
};

/// A body call that ran past StallOptions::limit (see the stall watchdog, options.hpp).
struct Stall {
  std::string stage;
  std::uint64_t index = 0;  ///< the item's source index (a source: the item it was producing)
  std::string item;         ///< StallOptions::item_name(index), or empty
  /// How long the call had run: when reported (StallOptions::on_stall), then, in RunReport, until
  /// it returned (to the watchdog's resolution, limit / 4).
  std::chrono::nanoseconds running{0};
  /// False when reported, true in RunReport (a run ends after its calls).
  bool returned = false;
};

/// "stage 'decode' has been on item 17 (photos/a.jpg) for 12.0 s".
std::string describe(const Stall& stall);

struct RunReport {
  std::vector<StageStats> stages;
  std::uint64_t produced = 0;              ///< items the source produced
  std::uint64_t consumed = 0;              ///< items the sinks consumed (all of them)
  std::uint64_t skipped = 0;               ///< all stages' skipped items
  std::vector<SkippedItem> skipped_items;  ///< the first PipelineOptions::max_listed_skips
  bool stopped = false;                    ///< ended early by stop() or a signal, after draining
  bool cancelled = false;                  ///< ended early by cancel() or a second signal, items discarded
  std::chrono::nanoseconds elapsed{0};
  /// The scheduler's moves, in order (empty without PipelineOptions::autotune).
  std::vector<Decision> decisions;
  std::size_t max_in_flight = 0;  ///< the in-flight limit at the end
  /// Body calls that ran past PipelineOptions::stall's limit, in the order found.
  std::vector<Stall> stalls;
};

/// A human-readable table of the stages (one line each).
void print(std::ostream& out, const RunReport& report);

}  // namespace stoke::graph
