// What both graph benchmarks (graph_executor.cpp: the chain and tbb; graph_dag.cpp: the graph)
// run per item: a spin of a given length, and the worker count. Private to stoke_bench.
#pragma once

#include <oneapi/tbb/task_arena.h>

#include <chrono>
#include <cstdint>

#include "stoke/bench/graph_executor.hpp"
#include "stoke/bench/timing.hpp"

namespace stoke::bench {
namespace detail {

// Spins for about `ns` nanoseconds, so that per-item work can be dialled in. The result does not
// depend on how long it spun, so the two pipelines' checksums can be compared.
inline std::uint64_t work(std::uint64_t x, int ns) {
  if (ns > 0) {
    std::uint64_t state = x;
    const auto until = Clock::now() + std::chrono::nanoseconds(ns);
    while (Clock::now() < until) state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    asm volatile("" : : "r"(state));  // keep the loop
  }
  return x + 1;
}

inline int workers(const GraphExecutorOptions& o) {
  return o.threads > 0 ? o.threads : tbb::this_task_arena::max_concurrency();
}

}  // namespace detail

}  // namespace stoke::bench
