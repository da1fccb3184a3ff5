// The median of a set of measurements: what the benchmarks compare, since a run disturbed by
// other work on a shared machine then counts once, however far off it is.
#pragma once

#include <algorithm>
#include <vector>

namespace stoke::app {

/// The middle value (the mean of the two middle ones for an even count); 0 for none.
inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace stoke::app
