// `stoke bench graph`: what the graph executor itself costs per item and stage, against the same
// work through tbb::parallel_pipeline (bench::measure_graph_executor); this file parses the
// options and prints.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stoke/bench/graph_executor.hpp>

#include "cli.hpp"
#include "commands.hpp"
#include "status_line.hpp"

namespace stoke::app {

namespace po = boost::program_options;

int bench_graph(int argc, char** argv) {
  bench::GraphExecutorOptions c;
  bool json = false;
  CommandOptions cli("bench graph",
                     "Measures the graph executor's own cost: a source, N trivial map stages and a sink run\n"
                     "through stoke::graph and through tbb::parallel_pipeline with the same threads and\n"
                     "in-flight limit, interleaved, and prints the cost per item per stage of each and the\n"
                     "ratio of the medians (stoke / tbb; lower is better, 1.0 means no extra cost).");
  cli.add()("items", po::value(&c.items)->default_value(c.items), "items per run")(
      "stages", po::value(&c.stages)->default_value(c.stages), "map stages between source and sink")(
      "threads", po::value(&c.threads)->default_value(c.threads), "worker threads (0: one per core)")(
      "in-flight", po::value(&c.in_flight)->default_value(c.in_flight), "items in flight (tbb: max live tokens)")(
      "repeat", po::value(&c.repeat)->default_value(c.repeat), "runs of each, interleaved; medians are compared")(
      "work-ns", po::value(&c.work_ns)->default_value(c.work_ns), "synthetic work per item per map stage, in ns")(
      "ordered", po::bool_switch(&c.ordered), "deliver to the sink in source order (tbb: serial_in_order sink)")(
      "only", po::value(&c.only), "run one executor, stoke or tbb (for callgrind: scripts/graph-instructions.sh)")(
      "json", po::bool_switch(&json), "print one JSON line instead of the table");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.items == 0 || c.stages < 1 || c.repeat < 1 || c.in_flight == 0 || c.threads < 0)
    return cli.usage_error("--items, --stages, --repeat and --in-flight must be positive, --threads >= 0");
  if (!c.only.empty()) {
    if (auto mistake = choice_error("only", c.only, {"stoke", "tbb"}); !mistake.empty()) return cli.usage_error(mistake);
  }

  StatusLine line(std::chrono::milliseconds(0), std::chrono::milliseconds(5000));
  const bench::GraphExecutorResult r = bench::measure_graph_executor(c, [&](int run, int runs) {
    if (!json) line.show([&] { return format("bench graph: run %d/%d", run, runs); });
  });
  line.clear();
  if (json) {
    print_json(r);
    return 0;
  }
  std::printf("graph executor: %llu items, source + %d map stages + sink, %d threads, %zu in flight, %d ns work, %s\n",
              static_cast<unsigned long long>(c.items), c.stages, r.threads, c.in_flight, c.work_ns,
              c.ordered ? "ordered" : "unordered");
  std::printf("  stoke::graph            %8.1f ns per item per stage  (%.0f items/s)\n", r.stoke_ns_per_item_stage,
              r.stoke_items_per_sec);
  std::printf("  tbb::parallel_pipeline  %8.1f ns per item per stage  (%.0f items/s)\n", r.tbb_ns_per_item_stage,
              r.tbb_items_per_sec);
  std::printf("  ratio stoke/tbb         %8.2f\n", r.ratio);
  return 0;
}

}  // namespace stoke::app
