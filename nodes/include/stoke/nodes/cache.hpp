// CachedDataset: keeps items' encoded bytes in memory after their first read, so that a dataset
// that fits in the budget is read from disk once, not once per epoch.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoke/nodes/dataset.hpp"

namespace stoke::nodes {

/// Counters of a CachedDataset, read at one moment (each counter is exact; together they are a
/// near-consistent snapshot while reads are running).
struct CacheStats {
  std::uint64_t hits = 0;        ///< reads answered from memory
  std::uint64_t misses = 0;      ///< reads passed to the inner dataset
  std::size_t bytes_cached = 0;  ///< bytes of item data held; never above the budget
  std::size_t items_cached = 0;
  std::size_t byte_budget = 0;
};

/// Wraps a dataset with an in-memory cache of its items' bytes.
///
/// read(i) answers from the cache when item i is there; otherwise it reads through the inner
/// dataset and keeps a copy of the bytes if they still fit in `byte_budget`. Nothing is ever
/// evicted: once the budget is spent, the remaining items are read through every time. The cache
/// holds its own copy of each item's bytes (not a view into the inner dataset's buffers), so the
/// budget bounds real memory: bytes_cached <= byte_budget always. Not counted in the budget: a
/// fixed ~100 bytes per item of the inner dataset (allocated up front) and each cached item's name.
///
/// Thread-safety: read() and stats() may be called from any number of threads at once, for the
/// same or different items. Two threads that miss the same item at once both read it through;
/// one copy is kept.
class CachedDataset final : public Dataset {
 public:
  /// Throws std::invalid_argument when `inner` is null.
  CachedDataset(DatasetPtr inner, std::size_t byte_budget);
  ~CachedDataset() override;

  std::size_t size() const noexcept override { return inner_->size(); }
  int label(std::size_t i) const override { return inner_->label(i); }
  std::string name(std::size_t i) const override { return inner_->name(i); }
  Sample read(std::size_t i) const override;
  const std::vector<std::string>& classes() const noexcept override { return inner_->classes(); }
  const std::vector<IgnoredFile>& ignored() const noexcept override { return inner_->ignored(); }
  std::optional<NetworkStats> network() const override { return inner_->network(); }
  Groups groups() const override { return inner_->groups(); }
  // will_read is not passed on: the items found here are never read from `inner`, so a plan of
  // them would hold what it fetched for reads that never come.

  CacheStats stats() const noexcept;
  const DatasetPtr& inner() const noexcept { return inner_; }

 private:
  struct Slot;

  DatasetPtr inner_;
  std::size_t budget_;
  std::unique_ptr<Slot[]> slots_;
  mutable std::atomic<std::uint64_t> hits_{0};
  mutable std::atomic<std::uint64_t> misses_{0};
  mutable std::atomic<std::size_t> bytes_{0};
  mutable std::atomic<std::size_t> items_{0};
};

}  // namespace stoke::nodes
