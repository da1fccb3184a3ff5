// The size classes of nn's caching allocators (cuda/device_pool.hpp for device memory,
// CpuBackend's HostPool for host memory): a freed block is kept in the bin of its rounded size
// and handed to the next request that rounds the same.
#pragma once

#include <bit>
#include <cstddef>

namespace stoke::nn {

/// `bytes` rounded up to its bin: multiples of 512 below 1 MiB; above, a quarter of the largest
/// power of two not above `bytes` (at most 25% waste, 4 bins per octave).
inline std::size_t pool_bin_size(std::size_t bytes) noexcept {
  constexpr std::size_t small = 512;
  constexpr std::size_t mib = std::size_t{1} << 20;
  if (bytes < mib) return bytes == 0 ? small : (bytes + small - 1) / small * small;
  const std::size_t step = std::bit_floor(bytes) / 4;
  return (bytes + step - 1) / step * step;
}

}  // namespace stoke::nn
