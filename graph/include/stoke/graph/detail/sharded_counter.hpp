// ShardedCounter: a statistic every item adds to, from any thread, and that is read only now and
// then (stats(), the scheduler). Each thread adds into a cache line of its own with a plain load
// and store, no locked instruction (an uncontended lock-prefixed add still costs tens of cycles,
// several times per item and stage); a read sums the slots.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>

namespace stoke::graph::detail {

/// Slots of every ShardedCounter. The first `counter_slots - 1` threads that add get one each, to
/// themselves; later threads share the last one, with atomic adds.
inline constexpr std::size_t counter_slots = 64;

/// A new thread's slot (see counter_slots).
std::size_t next_counter_slot() noexcept;

/// The calling thread's slot in every ShardedCounter. Called several times per item and stage, so
/// it is a thread-local read, initial-exec (no call to __tls_get_addr in position-independent
/// code; the few bytes come from the static TLS surplus when a library holding it is dlopen'ed).
[[gnu::always_inline]] inline std::size_t counter_slot() noexcept {
  static thread_local std::size_t slot __attribute__((tls_model("initial-exec"))) = ~std::size_t{0};
  if (slot == ~std::size_t{0}) [[unlikely]]
    slot = next_counter_slot();
  return slot;
}

template <class T>
class ShardedCounter {
 public:
  [[gnu::always_inline]] void add(T n) noexcept {
    const std::size_t slot = counter_slot();
    std::atomic<T>& value = slots_[slot].value;
    if (slot + 1 < counter_slots) {
      value.store(value.load(std::memory_order_relaxed) + n, std::memory_order_release);  // this thread's alone
    } else {
      value.fetch_add(n, std::memory_order_release);
    }
  }
  /// The sum; exact once the adding threads are done, a snapshot while they run. Release adds
  /// and acquire loads (free on x86) order two counters: a reader that loads B, then A, sees
  /// every A-add that happened before a B-add it saw (an item's "in" before its "out").
  T load() const noexcept {
    T sum{};
    for (const Slot& slot : slots_) sum += slot.value.load(std::memory_order_acquire);
    return sum;
  }

 private:
  struct alignas(64) Slot {
    std::atomic<T> value{};
  };
  std::array<Slot, counter_slots> slots_{};
};

}  // namespace stoke::graph::detail
