// Tallies: what each thread did in one stage -- items in and out, busy and running time, and
// whether it is in the stage on a carried visit (StageBase) -- one cache line per thread, written
// by that thread alone with a plain load and store (an uncontended lock-prefixed add still costs
// tens of cycles, several times per item and stage) and summed by the rare reader (stats(), the
// scheduler, a stage deciding whether it is done).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace stoke::graph::detail {

/// Slots of every Tallies. The first `tally_slots - 1` threads that add get one each, to
/// themselves; later threads share the last one, with atomic adds.
inline constexpr std::size_t tally_slots = 64;

/// A new thread's slot (see tally_slots).
std::size_t next_tally_slot() noexcept;

/// The calling thread's slot in every Tallies. Called several times per item and stage, so it is
/// a plain thread-local read: in an executable the linker turns the access into a load from the
/// thread pointer. It keeps the default TLS model, not initial-exec: a library that holds it may
/// be dlopen'ed (the Python module), and an initial-exec variable makes the loader place that
/// library's whole TLS block in the static TLS surplus, where the CUDA runtime's 4 KiB-aligned
/// block does not fit ("cannot allocate memory in static TLS block").
[[gnu::always_inline]] inline std::size_t tally_slot() noexcept {
  static thread_local std::size_t slot = ~std::size_t{0};
  if (slot == ~std::size_t{0}) [[unlikely]]
    slot = next_tally_slot();
  return slot;
}

/// True for a thread with a slot of its own (not the shared last one).
[[gnu::always_inline]] inline bool owns_tally_slot() noexcept { return tally_slot() + 1 < tally_slots; }

/// One thread's figures in one stage.
struct alignas(64) Tally {
  std::atomic<std::uint64_t> in{0};
  std::atomic<std::uint64_t> out{0};
  std::atomic<std::int64_t> busy{0};          ///< ticks in body calls (timed ones, weighted)
  std::atomic<std::int64_t> running{0};       ///< ticks of closed running intervals this thread closed
  std::atomic<std::int64_t> carried_busy{0};  ///< the part of `busy` spent in carried visits
  /// Carried visits this thread is in (StageBase::try_carry); only this thread writes it.
  std::atomic<int> carried{0};
  // Call timing (StageBase::begin_call), this thread's alone: calls left before the next timed
  // one, and the weight of the next.
  int untimed_left = 0;
  int stride = 1;
  // The stall watchdog (StageBase::WatchedCall), written by this thread alone: the body call it
  // is in, as (source index + 1) << 8 | (calls & 0xff) (0: none), and the calls it made.
  std::uint8_t calls = 0;
  std::atomic<std::uint64_t> calling{0};
};
static_assert(sizeof(Tally) == 64, "a Tally is one cache line");

class Tallies {
 public:
  /// The calling thread's tally (shared by the threads beyond the first tally_slots - 1).
  [[gnu::always_inline]] Tally& mine() noexcept { return slots_[tally_slot()]; }

  /// Adds to one figure of the calling thread's tally. Release adds and acquire sums (free on
  /// x86) order two figures: a reader that sums B, then A, sees every A-add that happened before
  /// a B-add it saw (an item's "in" before its "out").
  template <class T>
  [[gnu::always_inline]] void add(std::atomic<T> Tally::*figure, T n) noexcept {
    std::atomic<T>& value = mine().*figure;
    if (owns_tally_slot())
      value.store(value.load(std::memory_order_relaxed) + n, std::memory_order_release);  // this thread's alone
    else
      value.fetch_add(n, std::memory_order_release);
  }

  /// The sum of one figure over the threads; exact once they are done, a snapshot while they run.
  template <class T>
  T sum(const std::atomic<T> Tally::*figure) const noexcept {
    T total{};
    for (const Tally& slot : slots_) total += (slot.*figure).load(std::memory_order_acquire);
    return total;
  }

  const std::array<Tally, tally_slots>& slots() const noexcept { return slots_; }

 private:
  std::array<Tally, tally_slots> slots_{};
};

}  // namespace stoke::graph::detail
