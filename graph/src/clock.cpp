#include "stoke/graph/detail/clock.hpp"

namespace stoke::graph::detail {

double nanoseconds_per_tick() noexcept {
#ifdef STOKE_GRAPH_TSC
  // About 2 ms of spinning, once per process; accurate to well under 1%.
  static const double factor = [] {
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const std::int64_t c0 = ticks();
    while (clock::now() - t0 < std::chrono::milliseconds(2)) {
    }
    const auto t1 = clock::now();
    const std::int64_t c1 = ticks();
    const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    return c1 > c0 ? ns / static_cast<double>(c1 - c0) : 1.0;
  }();
  return factor;
#else
  return 1.0;
#endif
}

}  // namespace stoke::graph::detail
