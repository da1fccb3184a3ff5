#include "stoke/nodes/cache.hpp"

#include <stdexcept>
#include <utility>

#include "dataset_support.hpp"

namespace stoke::nodes {

namespace {
enum : std::uint8_t { empty, filling, ready };
}

/// One item's place in the cache. `sample` is written once, by the thread that moved `state`
/// from empty to filling, and read only after `state` is ready (release/acquire).
struct CachedDataset::Slot {
  std::atomic<std::uint8_t> state{empty};
  Sample sample;
};

CachedDataset::CachedDataset(DatasetPtr inner, std::size_t byte_budget)
    : inner_(std::move(inner)), budget_(byte_budget) {
  if (!inner_) throw std::invalid_argument("CachedDataset: no dataset to cache (null DatasetPtr)");
  slots_ = std::make_unique<Slot[]>(inner_->size());
}

CachedDataset::~CachedDataset() = default;

Sample CachedDataset::read(std::size_t i) const {
  if (i >= inner_->size()) detail::item_out_of_range("CachedDataset", i, inner_->size());
  Slot& slot = slots_[i];
  if (slot.state.load(std::memory_order_acquire) == ready) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return slot.sample;
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  Sample sample = inner_->read(i);
  sample.index = i;

  // Reserve room first, so that bytes_ never exceeds the budget, not even for a moment.
  const std::size_t size = sample.bytes.size();
  std::size_t used = bytes_.load(std::memory_order_relaxed);
  do {
    if (size > budget_ - used) return sample;
  } while (!bytes_.compare_exchange_weak(used, used + size, std::memory_order_relaxed));
  std::uint8_t expected = empty;
  if (!slot.state.compare_exchange_strong(expected, filling, std::memory_order_acq_rel)) {
    bytes_.fetch_sub(size, std::memory_order_relaxed);  // another thread is caching this item
    return sample;
  }
  // An owned copy: a view would pin the inner dataset's buffer (or mapping) instead.
  const auto bytes = sample.bytes.span();
  sample.bytes = Bytes(std::vector<std::byte>(bytes.begin(), bytes.end()));
  slot.sample = sample;
  slot.state.store(ready, std::memory_order_release);
  items_.fetch_add(1, std::memory_order_relaxed);
  return sample;
}

CacheStats CachedDataset::stats() const noexcept {
  return {hits_.load(std::memory_order_relaxed), misses_.load(std::memory_order_relaxed),
          bytes_.load(std::memory_order_relaxed), items_.load(std::memory_order_relaxed), budget_};
}

}  // namespace stoke::nodes
