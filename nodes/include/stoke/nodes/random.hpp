// nodes/ draws every crop, flip and shuffle from the graph's per-item generator
// (stoke/graph/random.hpp), keyed by (seed, epoch, index).
#pragma once

#include "stoke/graph/random.hpp"

namespace stoke::nodes {

using graph::ItemRng;
using graph::mix64;

}  // namespace stoke::nodes
