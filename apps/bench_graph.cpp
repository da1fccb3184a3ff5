// `stoke bench graph`: what the graph executor itself costs per item and stage, against the same
// work through tbb::parallel_pipeline (bench::measure_graph_executor); this file parses the
// options and prints.
#include <chrono>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include <stoke/bench/graph_executor.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "status_line.hpp"

namespace stoke::app {

namespace po = boost::program_options;

int bench_graph(int argc, char** argv) {
  bench::GraphExecutorOptions c;
  std::string threads = "0";
  bool json = false;
  CommandOptions cli("bench graph",
                     "Measures the graph executor's own cost: a source, N trivial map stages and a sink run\n"
                     "through stoke::graph and through tbb::parallel_pipeline with the same threads and\n"
                     "in-flight limit, interleaved, and prints the cost per item per stage of each and the\n"
                     "ratio of the medians (stoke / tbb; lower is better, 1.0 means no extra cost); and the\n"
                     "same work as a graph -- the map stages split between two branches of a fan-out, joined\n"
                     "again -- through stoke::graph, against the chain (below 1.0: the branches overlapped).\n"
                     "--threads 1,2,4,8,16 sweeps the thread counts: one measurement (and JSON line) each.");
  cli.add()("items", po::value(&c.items)->default_value(c.items), "items per run")(
      "stages", po::value(&c.stages)->default_value(c.stages), "map stages between source and sink")(
      "threads", po::value(&threads)->default_value(threads),
      "worker threads (0: one per core), or a comma-separated list to sweep")(
      "in-flight", po::value(&c.in_flight)->default_value(c.in_flight), "items in flight (tbb: max live tokens)")(
      "repeat", po::value(&c.repeat)->default_value(c.repeat), "runs of each, interleaved; medians are compared")(
      "work-ns", po::value(&c.work_ns)->default_value(c.work_ns), "synthetic work per item per map stage, in ns")(
      "ordered", po::bool_switch(&c.ordered), "deliver to the sink in source order (tbb: serial_in_order sink)")(
      "only", po::value(&c.only),
      "run one: stoke (the chain), tbb or dag (the graph) -- for callgrind: scripts/graph-instructions.sh")(
      "json", po::bool_switch(&json), "print one JSON line instead of the table");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  std::vector<int> sweep;
  for (std::size_t from = 0; from <= threads.size();) {
    const std::size_t comma = std::min(threads.find(',', from), threads.size());
    const std::string item = threads.substr(from, comma - from);
    char* end = nullptr;
    const long count = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || count < 0 || count > 4096)
      return cli.usage_error("--threads takes a count or a list of counts (0 to 4096) such as 1,2,4,8,16; got '" +
                             threads + "'");
    sweep.push_back(static_cast<int>(count));
    from = comma + 1;
  }
  if (c.items == 0 || c.stages < 1 || c.repeat < 1 || c.in_flight == 0)
    return cli.usage_error("--items, --stages, --repeat and --in-flight must be positive");
  if (!c.only.empty()) {
    if (auto mistake = choice_error("only", c.only, {"stoke", "tbb", "dag"}); !mistake.empty()) return cli.usage_error(mistake);
  }

  StatusLine line(std::chrono::milliseconds(0), std::chrono::milliseconds(5000));
  for (std::size_t k = 0; k < sweep.size(); ++k) {
    c.threads = sweep[k];
    const bench::GraphExecutorResult r = bench::measure_graph_executor(c, [&](int run, int runs) {
      if (!json) line.show([&] { return format("bench graph: %d threads, run %d/%d", sweep[k], run, runs); });
    });
    line.clear();
    if (json) {
      print_json(r);
      continue;
    }
    if (k == 0 || sweep.size() == 1) {
      std::printf("graph executor: %llu items, source + %d map stages + sink, %zu in flight, %d ns work, %s\n",
                  static_cast<unsigned long long>(c.items), c.stages, c.in_flight, c.work_ns,
                  c.ordered ? "ordered" : "unordered");
    }
    if (sweep.size() > 1) {
      if (k == 0) std::printf("  threads  stoke ns/item/stage  tbb ns/item/stage  ratio stoke/tbb  graph/chain\n");
      std::printf("  %7d  %19.1f  %17.1f  %15.2f  %11.2f\n", r.threads, r.stoke_ns_per_item_stage,
                  r.tbb_ns_per_item_stage, r.ratio, r.dag_vs_chain);
      std::fflush(stdout);
      continue;
    }
    std::printf("  %d threads\n", r.threads);
    std::printf("  stoke::graph            %8.1f ns per item per stage  (%.0f items/s)\n", r.stoke_ns_per_item_stage,
                r.stoke_items_per_sec);
    std::printf("  tbb::parallel_pipeline  %8.1f ns per item per stage  (%.0f items/s)\n", r.tbb_ns_per_item_stage,
                r.tbb_items_per_sec);
    std::printf("  ratio stoke/tbb         %8.2f\n", r.ratio);
    if (r.dag_vs_chain > 0)
      std::printf("  stoke::graph, as a graph %7.1f ns per item per stage  (%.2f x the chain: fan-out into 2\n"
                  "                          branches of the map stages, joined)\n",
                  r.dag_ns_per_item_stage, r.dag_vs_chain);
  }
  return 0;
}

}  // namespace stoke::app
