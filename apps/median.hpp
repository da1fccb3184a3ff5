// The median of a set of measurements: stoke::bench::median (bench/include/stoke/bench/timing.hpp),
// for the commands that include this header.
#pragma once

#include <stoke/bench/timing.hpp>

namespace stoke::app {

using bench::median;

}  // namespace stoke::app
