// The graph case of `stoke bench graph` (run_stoke_dag), in a translation unit of its own: the
// fan-out and join instantiate the executor's templates for the same item type as the chain, and
// sharing a unit with the chain changed how the compiler inlined the chain's copies (by 40
// instructions per item and stage under callgrind), which would blur the two measurements.
#include <cstdint>
#include <optional>
#include <stoke/graph/pipeline.hpp>
#include <string>
#include <tuple>

#include "graph_work.hpp"
#include "stoke/bench/graph_executor.hpp"
#include "stoke/bench/timing.hpp"

namespace stoke::bench {

using detail::work;
using detail::workers;

GraphRun run_stoke_dag(const GraphExecutorOptions& o) {
  graph::Pipeline pipe({.max_in_flight = o.in_flight, .threads = o.threads});
  GraphRun run;
  auto [left, right] =
      pipe.source("source", [i = std::uint64_t{0}, n = o.items]() mutable -> std::optional<std::uint64_t> {
            return i < n ? std::optional(i++) : std::nullopt;
          }).fan_out("fan-out");
  const graph::StageOptions mapping{.concurrency = graph::parallel(workers(o)), .ordered = o.ordered};
  const int first_half = (o.stages + 1) / 2;
  for (int s = 0; s < o.stages; ++s) {
    auto& branch = s < first_half ? left : right;
    branch = std::move(branch).map(
        "map" + std::to_string(s), [ns = o.work_ns](std::uint64_t x) { return work(x, ns); }, mapping);
  }
  // Each branch added its stage count to x: a pair of one x gives what the chain's sink gets (x +
  // stages); a pair of two positions spoils the checksum.
  const auto second_half = static_cast<std::uint64_t>(o.stages - first_half);
  graph::join("join", std::move(left), std::move(right))
      .sink(
          "sink",
          [&run, first = static_cast<std::uint64_t>(first_half), second_half](std::tuple<std::uint64_t, std::uint64_t> pair) {
            const auto [a, b] = pair;
            run.checksum += a - first == b - second_half ? a + second_half : 0;
          },
          {.ordered = o.ordered});
  const auto begin = Clock::now();
  pipe.run();
  run.seconds = seconds_between(begin, Clock::now());
  return run;
}

}  // namespace stoke::bench
