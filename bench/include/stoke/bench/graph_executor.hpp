// The graph executor's own cost (`stoke bench graph`): a source, N map stages and a sink run
// through stoke::graph and through tbb::parallel_pipeline with the same threads and in-flight
// limit, interleaved, and the medians compared; and the same work as a graph (the map stages split
// between two branches of a fan-out, joined again) through stoke::graph.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace stoke::bench {

struct GraphExecutorOptions {
  std::uint64_t items = 200000;  ///< items per run
  int stages = 3;                ///< map stages between source and sink
  int threads = 0;               ///< worker threads (0: one per core)
  std::size_t in_flight = 64;    ///< items in flight (tbb: max live tokens)
  int repeat = 5;                ///< runs of each executor, interleaved
  int work_ns = 0;               ///< synthetic work per item per map stage, nanoseconds (spun)
  bool ordered = false;          ///< deliver to the sink in source order (tbb: a serial_in_order sink)
  /// Run only one: "stoke" (the chain), "tbb" or "dag" (the same work as a graph); empty: all.
  /// E.g. to count one's instructions under callgrind (scripts/graph-instructions.sh); the
  /// ratios are then 0.
  std::string only{};
};

/// One run of one executor: its wall time and the sum of what its sink received. Every map stage
/// adds 1, so the checksum is items * (items - 1) / 2 + items * stages, whatever the timing.
struct GraphRun {
  double seconds = 0;
  std::uint64_t checksum = 0;
};

/// One run through stoke::graph::Pipeline / through tbb::parallel_pipeline.
GraphRun run_stoke_graph(const GraphExecutorOptions& options);
GraphRun run_tbb_pipeline(const GraphExecutorOptions& options);
/// One run of the same work as a graph: source -> fan-out -> (the first half of the map stages |
/// the rest) -> join -> sink, the sink adding up the branches' results (the same checksum).
GraphRun run_stoke_dag(const GraphExecutorOptions& options);

struct GraphExecutorResult {
  GraphExecutorOptions options{};       ///< as given
  int threads = 0;                      ///< the worker threads used
  std::vector<double> stoke_seconds{};  ///< each timed run, in order
  std::vector<double> tbb_seconds{};
  std::vector<double> dag_seconds{};
  std::uint64_t checksum = 0;          ///< the same for every run of both
  double stoke_ns_per_item_stage = 0;  ///< median run / (items x (stages + 2))
  double tbb_ns_per_item_stage = 0;
  double ratio = 0;                ///< stoke / tbb: 1.0 means no extra cost
  /// The graph's median run / (items x (stages + 2)), as for the chain, and its median run over
  /// the chain's (below 1: the branches' work overlapped; 0 without a stoke run).
  double dag_ns_per_item_stage = 0;
  double dag_vs_chain = 0;
  double stoke_items_per_sec = 0;  ///< items / median run
  double tbb_items_per_sec = 0;
};

/// The result as one JSON object (`stoke bench graph --json`): "bench":"graph", the options, the
/// threads and the figures above but the runs' times and the checksum.
void to_json(nlohmann::ordered_json& json, const GraphExecutorResult& result);

/// One untimed run of each (thread pools, allocators, page faults), then `repeat` of each (the
/// stoke chain, the stoke graph, tbb), alternated; `progress(r, repeat)` after the r-th pair. Throws std::invalid_argument for
/// items, stages, repeat or in_flight below 1, threads below 0 or another `only`, and std::runtime_error when a
/// run's checksum differs from the others' (the two pipelines did not do the same work). Measures
/// the machine: run one benchmark at a time.
GraphExecutorResult measure_graph_executor(const GraphExecutorOptions& options,
                                           const std::function<void(int run, int runs)>& progress = {});

}  // namespace stoke::bench
