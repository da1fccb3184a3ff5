#include "stoke/bench/graph_executor.hpp"

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <stoke/graph/pipeline.hpp>
#include <string>

#include "graph_work.hpp"
#include "stoke/bench/timing.hpp"

namespace stoke::bench {
// work() and workers(): graph_work.hpp.

GraphRun run_stoke_graph(const GraphExecutorOptions& o) {
  graph::Pipeline pipe({.max_in_flight = o.in_flight, .threads = o.threads});
  GraphRun run;
  auto flow = pipe.source("source", [i = std::uint64_t{0}, n = o.items]() mutable -> std::optional<std::uint64_t> {
    return i < n ? std::optional(i++) : std::nullopt;
  });
  const graph::StageOptions mapping{.concurrency = graph::parallel(detail::workers(o)), .ordered = o.ordered};
  // Built stage by stage: each map returns the new open end, which the next one continues.
  for (int s = 0; s < o.stages; ++s)
    flow = std::move(flow).map(
        "map" + std::to_string(s), [ns = o.work_ns](std::uint64_t x) { return detail::work(x, ns); }, mapping);
  std::move(flow).sink("sink", [&run](std::uint64_t x) { run.checksum += x; }, {.ordered = o.ordered});
  const auto begin = Clock::now();
  pipe.run();
  run.seconds = seconds_between(begin, Clock::now());
  return run;
}

GraphRun run_tbb_pipeline(const GraphExecutorOptions& o) {
  std::optional<tbb::global_control> parallelism;
  if (o.threads > 0) parallelism.emplace(tbb::global_control::max_allowed_parallelism, o.threads);
  tbb::task_arena arena(o.threads > 0 ? o.threads : tbb::task_arena::automatic);
  GraphRun run;
  const auto begin = Clock::now();
  arena.execute([&] {
    std::uint64_t i = 0;
    auto chain = tbb::make_filter<void, std::uint64_t>(tbb::filter_mode::serial_in_order,
                                                       [&](tbb::flow_control& fc) -> std::uint64_t {
                                                         if (i >= o.items) {
                                                           fc.stop();
                                                           return 0;
                                                         }
                                                         return i++;
                                                       });
    for (int s = 0; s < o.stages; ++s)
      chain = chain & tbb::make_filter<std::uint64_t, std::uint64_t>(
                          tbb::filter_mode::parallel, [ns = o.work_ns](std::uint64_t x) { return detail::work(x, ns); });
    const auto sink_mode = o.ordered ? tbb::filter_mode::serial_in_order : tbb::filter_mode::serial_out_of_order;
    tbb::parallel_pipeline(o.in_flight, chain & tbb::make_filter<std::uint64_t, void>(
                                                    sink_mode, [&run](std::uint64_t x) { run.checksum += x; }));
  });
  run.seconds = seconds_between(begin, Clock::now());
  return run;
}

GraphExecutorResult measure_graph_executor(const GraphExecutorOptions& o,
                                           const std::function<void(int run, int runs)>& progress) {
  if (o.items == 0 || o.stages < 1 || o.repeat < 1 || o.in_flight == 0 || o.threads < 0)
    throw std::invalid_argument("items, stages, repeat and in_flight must be positive, threads >= 0");
  if (!o.only.empty() && o.only != "stoke" && o.only != "tbb" && o.only != "dag")
    throw std::invalid_argument("only must be stoke, tbb, dag or empty (all), not '" + o.only + "'");
  const bool stoke = o.only.empty() || o.only == "stoke", tbb = o.only.empty() || o.only == "tbb";
  const bool dag = o.only.empty() || o.only == "dag";
  GraphExecutorResult r;
  r.options = o;
  r.threads = detail::workers(o);
  // Warm-up: pools, allocators, pages.
  r.checksum = (stoke ? run_stoke_graph(o) : tbb ? run_tbb_pipeline(o) : run_stoke_dag(o)).checksum;
  const auto check = [&](const GraphRun& run, const char* executor) {
    if (run.checksum != r.checksum)
      throw std::runtime_error("checksums differ (first run " + std::to_string(r.checksum) + ", " + executor + " " +
                               std::to_string(run.checksum) + "): the two pipelines did not do the same work");
    return run.seconds;
  };
  if (stoke && tbb) check(run_tbb_pipeline(o), "tbb");
  if (dag && (stoke || tbb)) check(run_stoke_dag(o), "stoke graph");
  for (int k = 0; k < o.repeat; ++k) {
    if (stoke) r.stoke_seconds.push_back(check(run_stoke_graph(o), "stoke"));
    if (dag) r.dag_seconds.push_back(check(run_stoke_dag(o), "stoke graph"));
    if (tbb) r.tbb_seconds.push_back(check(run_tbb_pipeline(o), "tbb"));
    if (progress) progress(k + 1, o.repeat);
  }
  const double visits = static_cast<double>(o.items) * (o.stages + 2);  // stage visits per run
  const double items = static_cast<double>(o.items);
  if (stoke) {
    r.stoke_ns_per_item_stage = median(r.stoke_seconds) * 1e9 / visits;
    r.stoke_items_per_sec = items / median(r.stoke_seconds);
  }
  if (dag) r.dag_ns_per_item_stage = median(r.dag_seconds) * 1e9 / visits;
  if (dag && stoke) r.dag_vs_chain = median(r.dag_seconds) / median(r.stoke_seconds);
  if (tbb) {
    r.tbb_ns_per_item_stage = median(r.tbb_seconds) * 1e9 / visits;
    r.tbb_items_per_sec = items / median(r.tbb_seconds);
  }
  r.ratio = stoke && tbb ? r.stoke_ns_per_item_stage / r.tbb_ns_per_item_stage : 0;
  return r;
}

void to_json(nlohmann::ordered_json& json, const GraphExecutorResult& r) {
  const GraphExecutorOptions& o = r.options;
  json = {{"bench", "graph"},
          {"items", o.items},
          {"stages", o.stages},
          {"threads", r.threads},
          {"in_flight", o.in_flight},
          {"work_ns", o.work_ns},
          {"ordered", o.ordered},
          {"stoke_ns_per_item_stage", r.stoke_ns_per_item_stage},
          {"tbb_ns_per_item_stage", r.tbb_ns_per_item_stage},
          {"ratio", r.ratio},
          {"dag_ns_per_item_stage", r.dag_ns_per_item_stage},
          {"dag_vs_chain", r.dag_vs_chain},
          {"stoke_items_per_sec", r.stoke_items_per_sec},
          {"tbb_items_per_sec", r.tbb_items_per_sec}};
}

}  // namespace stoke::bench
