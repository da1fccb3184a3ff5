// nodes/ draws every crop, flip and shuffle from stoke::base's per-item generator
// (stoke/base/random.hpp), keyed by (seed, epoch, index).
#pragma once

#include "stoke/base/random.hpp"

namespace stoke::nodes {

using base::ItemRng;
using base::mix64;

}  // namespace stoke::nodes
