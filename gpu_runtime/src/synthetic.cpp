#include "stoke/gpu/synthetic.hpp"

#include "stoke/gpu/error.hpp"

namespace stoke::gpu {

namespace detail {
// src/cuda/synthetic.cu (CUDA build only).
void launch_synthetic_work(StreamView stream, std::chrono::nanoseconds duration);
}  // namespace detail

void synthetic_work(StreamView stream, std::chrono::nanoseconds duration) {
  if (duration.count() <= 0) return;
  if (stream.is_host()) {
    const auto end = std::chrono::steady_clock::now() + duration;
    while (std::chrono::steady_clock::now() < end) {
    }
    return;
  }
#if STOKE_HAS_CUDA
  detail::launch_synthetic_work(stream, duration);
#else
  throw DeviceError("synthetic_work on " + stream.device().str() +
                    " needs a stoke built with CUDA (reconfigure with -DSTOKE_CUDA=ON); use the CPU device");
#endif
}

}  // namespace stoke::gpu
