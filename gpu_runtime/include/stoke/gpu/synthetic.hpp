// Synthetic compute: work of a known duration, to measure a pipeline without a model (the device
// benchmark, the overlap tests).
#pragma once

#include <chrono>

#include "stoke/gpu/stream.hpp"

namespace stoke::gpu {

/// Enqueues a kernel that keeps every SM of the stream's device busy for `duration` (timed with
/// the GPU's nanosecond clock), or, on the host stream, spins the calling thread for it.
void synthetic_work(StreamView stream, std::chrono::nanoseconds duration);

}  // namespace stoke::gpu
