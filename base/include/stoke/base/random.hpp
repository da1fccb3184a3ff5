// Per-item random numbers (the graph's items: nodes/ draws crops and flips from them, nn/ its
// initial weights and dropout masks): a function of (seed, epoch, index), never of a thread's state, so a
// seeded run gives the same crops, flips and shuffles whatever the thread count.
#pragma once

#include <cstdint>
#include <limits>

namespace stoke::base {

/// SplitMix64's finalizer: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/// A small counter-based generator for one item. Satisfies UniformRandomBitGenerator, so the
/// <random> distributions work with it, but their results differ between standard libraries;
/// prefer the members below, which are exact and portable.
class ItemRng {
 public:
  using result_type = std::uint64_t;

  /// The stream for item `index` of epoch `epoch` of a run seeded with `seed`. `stream` separates
  /// independent uses of the same item (e.g. augmentation and shuffling).
  constexpr ItemRng(std::uint64_t seed, std::uint32_t epoch, std::uint64_t index, std::uint64_t stream = 0) noexcept
      : state_(mix64(mix64(mix64(seed ^ 0x5851f42d4c957f2dULL) ^ (std::uint64_t{epoch} << 1 | 1)) ^ index) ^
               mix64(stream + 0x9e3779b97f4a7c15ULL)) {}

  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return std::numeric_limits<result_type>::max(); }

  /// The next 64 random bits (SplitMix64).
  constexpr result_type operator()() noexcept {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }
  /// Uniform in [0, 1), 53 bits.
  constexpr double uniform() noexcept { return static_cast<double>((*this)() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  constexpr double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [lo, hi] (inclusive); lo <= hi.
  constexpr std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) noexcept {
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    if (span == 0) return static_cast<std::int64_t>((*this)());  // the full 64-bit range
    // Lemire's nearly divisionless method would be faster; the modulo bias at 2^-40 is irrelevant here.
    return lo + static_cast<std::int64_t>((*this)() % span);
  }
  /// True with probability p.
  constexpr bool bernoulli(double p) noexcept { return uniform() < p; }

 private:
  std::uint64_t state_;
};

}  // namespace stoke::base
