// Dropout's mask as a pure function of (seed, element index), shared by the CPU and CUDA
// backends so that both drop the same elements: element i is kept when
//   mix64(seed ^ (i * 0x9e3779b97f4a7c15)) >= p * 2^64
// (mix64 is SplitMix64's finaliser, stoke::base::mix64). Usable from .cpp and .cu files.
#pragma once

#include <cstdint>

#include "host_device.hpp"

namespace stoke::nn::dropout {

inline constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

/// stoke::base::mix64, repeated here because device code cannot call the host's constexpr one
/// (elementwise_cuda.cpp checks at compile time that the two agree).
STOKE_NN_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/// p * 2^64: an element is dropped when its hash is below it. p is in [0, 1), so it fits.
inline std::uint64_t threshold(float p) noexcept {
  return static_cast<std::uint64_t>(static_cast<double>(p) * 0x1.0p64);
}

/// Whether element `index` is kept.
STOKE_NN_HOST_DEVICE constexpr bool keeps(std::uint64_t seed, std::uint64_t index, std::uint64_t threshold) noexcept {
  return mix64(seed ^ (index * kGolden)) >= threshold;
}

}  // namespace stoke::nn::dropout
