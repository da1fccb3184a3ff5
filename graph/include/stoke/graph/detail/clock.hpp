// A cheap monotonic clock for per-item timing.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(_M_X64)
#include <x86intrin.h>
#define STOKE_GRAPH_TSC 1
#endif

namespace stoke::graph::detail {

/// Ticks of the CPU's time-stamp counter on x86-64 (invariant on every CPU of the last decade),
/// nanoseconds of steady_clock elsewhere. Every item's busy time and trace span is measured with
/// it, so it must cost a few cycles: clock_gettime can cost far more on virtual machines.
inline std::int64_t ticks() noexcept {
#ifdef STOKE_GRAPH_TSC
  return static_cast<std::int64_t>(__rdtsc());
#else
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
#endif
}

/// Nanoseconds per tick, measured once against steady_clock on first use.
double nanoseconds_per_tick() noexcept;

inline std::int64_t ticks_to_ns(std::int64_t t) noexcept {
  return static_cast<std::int64_t>(static_cast<double>(t) * nanoseconds_per_tick());
}

}  // namespace stoke::graph::detail
