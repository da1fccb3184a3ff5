// `stoke bench graph`: what the graph executor itself costs per item and stage, against the same
// work through tbb::parallel_pipeline in the same process (the machine may be shared and noisy,
// so the two are interleaved and the medians compared).
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "median.hpp"
#include "stoke/graph/pipeline.hpp"

namespace stoke::app {
namespace {

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

struct Config {
  std::uint64_t items = 200000;
  int stages = 3;  // map stages between source and sink
  int threads = 0;
  std::size_t in_flight = 64;
  int repeat = 5;
  int work_ns = 0;  // synthetic work per item per map stage
  bool ordered = false;
};

// Spins for about `ns` nanoseconds, so that per-item work can be dialled in. The result does not
// depend on how long it spun, so the two pipelines' checksums can be compared.
std::uint64_t work(std::uint64_t x, int ns) {
  if (ns > 0) {
    std::uint64_t state = x;
    const auto until = Clock::now() + std::chrono::nanoseconds(ns);
    while (Clock::now() < until) state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    asm volatile("" : : "r"(state));  // keep the loop
  }
  return x + 1;
}

double run_stoke(const Config& c, std::uint64_t& checksum) {
  graph::Pipeline pipe({.max_in_flight = c.in_flight, .threads = c.threads});
  const int workers = c.threads > 0 ? c.threads : tbb::this_task_arena::max_concurrency();
  std::uint64_t sum = 0;
  auto flow = pipe.source("source", [i = std::uint64_t{0}, n = c.items]() mutable -> std::optional<std::uint64_t> {
    return i < n ? std::optional(i++) : std::nullopt;
  });
  const graph::StageOptions mapping{.concurrency = graph::parallel(workers), .ordered = c.ordered};
  // Built stage by stage: each map returns the new open end, which the next one continues.
  for (int s = 0; s < c.stages; ++s)
    flow = std::move(flow).map(
        "map" + std::to_string(s), [ns = c.work_ns](std::uint64_t x) { return work(x, ns); }, mapping);
  std::move(flow).sink("sink", [&sum](std::uint64_t x) { sum += x; }, {.ordered = c.ordered});
  const auto begin = Clock::now();
  pipe.run();
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  checksum = sum;
  return seconds;
}

double run_tbb(const Config& c, std::uint64_t& checksum) {
  std::optional<tbb::global_control> parallelism;
  if (c.threads > 0) parallelism.emplace(tbb::global_control::max_allowed_parallelism, c.threads);
  tbb::task_arena arena(c.threads > 0 ? c.threads : tbb::task_arena::automatic);
  std::uint64_t sum = 0;
  const auto begin = Clock::now();
  arena.execute([&] {
    std::uint64_t i = 0;
    auto chain = tbb::make_filter<void, std::uint64_t>(tbb::filter_mode::serial_in_order,
                                                       [&](tbb::flow_control& fc) -> std::uint64_t {
                                                         if (i >= c.items) {
                                                           fc.stop();
                                                           return 0;
                                                         }
                                                         return i++;
                                                       });
    for (int s = 0; s < c.stages; ++s)
      chain = chain & tbb::make_filter<std::uint64_t, std::uint64_t>(
                          tbb::filter_mode::parallel, [ns = c.work_ns](std::uint64_t x) { return work(x, ns); });
    const auto sink_mode = c.ordered ? tbb::filter_mode::serial_in_order : tbb::filter_mode::serial_out_of_order;
    tbb::parallel_pipeline(
        c.in_flight, chain & tbb::make_filter<std::uint64_t, void>(sink_mode, [&sum](std::uint64_t x) { sum += x; }));
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  checksum = sum;
  return seconds;
}

}  // namespace

int bench_graph(int argc, char** argv) {
  Config c;
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
      "json", po::bool_switch(&json), "print one JSON line instead of the table");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.items == 0 || c.stages < 1 || c.repeat < 1 || c.in_flight == 0 || c.threads < 0)
    return cli.usage_error("--items, --stages, --repeat and --in-flight must be positive, --threads >= 0");

  std::vector<double> stoke_s, tbb_s;
  std::uint64_t stoke_sum = 0, tbb_sum = 0;
  run_stoke(c, stoke_sum);  // warm-up: thread pools, allocators, page faults
  run_tbb(c, tbb_sum);
  for (int r = 0; r < c.repeat; ++r) {
    stoke_s.push_back(run_stoke(c, stoke_sum));
    tbb_s.push_back(run_tbb(c, tbb_sum));
    if (!json) std::cerr << "\rbench graph: run " << (r + 1) << "/" << c.repeat << std::flush;
  }
  if (!json) std::cerr << "\r" << std::string(40, ' ') << "\r";
  if (stoke_sum != tbb_sum)
    throw std::runtime_error("checksums differ (stoke " + std::to_string(stoke_sum) + ", tbb " +
                             std::to_string(tbb_sum) + "): the two pipelines did not do the same work");

  const double per = static_cast<double>(c.items) * (c.stages + 2);  // stage visits per run
  const double stoke_ns = median(stoke_s) * 1e9 / per;
  const double tbb_ns = median(tbb_s) * 1e9 / per;
  const double ratio = stoke_ns / tbb_ns;
  const int threads = c.threads > 0 ? c.threads : tbb::this_task_arena::max_concurrency();
  if (json) {
    std::printf(
        "{\"bench\":\"graph\",\"items\":%llu,\"stages\":%d,\"threads\":%d,\"in_flight\":%zu,\"work_ns\":%d,"
        "\"ordered\":%s,\"stoke_ns_per_item_stage\":%.1f,\"tbb_ns_per_item_stage\":%.1f,\"ratio\":%.3f,"
        "\"stoke_items_per_sec\":%.0f,\"tbb_items_per_sec\":%.0f}\n",
        static_cast<unsigned long long>(c.items), c.stages, threads, c.in_flight, c.work_ns,
        c.ordered ? "true" : "false", stoke_ns, tbb_ns, ratio, c.items / median(stoke_s), c.items / median(tbb_s));
  } else {
    std::printf(
        "graph executor: %llu items, source + %d map stages + sink, %d threads, %zu in flight, %d ns work, %s\n",
        static_cast<unsigned long long>(c.items), c.stages, threads, c.in_flight, c.work_ns,
        c.ordered ? "ordered" : "unordered");
    std::printf("  stoke::graph            %8.1f ns per item per stage  (%.0f items/s)\n", stoke_ns,
                c.items / median(stoke_s));
    std::printf("  tbb::parallel_pipeline  %8.1f ns per item per stage  (%.0f items/s)\n", tbb_ns,
                c.items / median(tbb_s));
    std::printf("  ratio stoke/tbb         %8.2f\n", ratio);
  }
  return 0;
}

}  // namespace stoke::app
