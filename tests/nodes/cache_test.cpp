// CachedDataset: hit/miss accounting, the byte budget as a hard bound, concurrent reads.
#include "stoke/nodes/cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

/// Items of known sizes and bytes that count how often they are read.
class CountingDataset final : public Dataset {
 public:
  explicit CountingDataset(std::vector<std::size_t> sizes) : sizes_(std::move(sizes)), reads_(sizes_.size()) {}

  std::size_t size() const noexcept override { return sizes_.size(); }
  int label(std::size_t i) const override { return static_cast<int>(i % 4); }
  std::string name(std::size_t i) const override { return "item" + std::to_string(i); }
  Sample read(std::size_t i) const override {
    reads_[i].fetch_add(1);
    Sample sample;
    sample.bytes = Bytes(test::distinct_bytes(static_cast<std::uint32_t>(i), sizes_[i]));
    sample.label = label(i);
    sample.index = i;
    sample.name = name(i);
    return sample;
  }
  const std::vector<std::string>& classes() const noexcept override { return classes_; }

  int reads(std::size_t i) const { return reads_[i].load(); }
  int total_reads() const {
    int total = 0;
    for (const auto& count : reads_) total += count.load();
    return total;
  }

 private:
  std::vector<std::size_t> sizes_;
  mutable std::vector<std::atomic<int>> reads_;
  std::vector<std::string> classes_{"a", "b", "c", "d"};
};

void expect_item(const Sample& sample, std::size_t i, std::size_t size) {
  EXPECT_EQ(test::to_vector(sample.bytes), test::distinct_bytes(static_cast<std::uint32_t>(i), size)) << "item " << i;
  EXPECT_EQ(sample.label, static_cast<int>(i % 4));
  EXPECT_EQ(sample.index, i);
  EXPECT_EQ(sample.name, "item" + std::to_string(i));
}

TEST(CachedDataset, SecondReadIsAHitAndDoesNotReachTheInnerDataset) {
  const auto inner = std::make_shared<CountingDataset>(std::vector<std::size_t>(10, 100));
  const CachedDataset cache(inner, 1000);
  for (std::size_t i = 0; i < 10; ++i) expect_item(cache.read(i), i, 100);
  CacheStats stats = cache.stats();
  EXPECT_EQ(stats.misses, 10u);
  EXPECT_EQ(stats.hits, 0u);
  EXPECT_EQ(stats.bytes_cached, 1000u);
  EXPECT_EQ(stats.items_cached, 10u);
  EXPECT_EQ(stats.byte_budget, 1000u);

  for (int epoch = 0; epoch < 3; ++epoch) {
    for (std::size_t i = 0; i < 10; ++i) expect_item(cache.read(i), i, 100);
  }
  stats = cache.stats();
  EXPECT_EQ(stats.misses, 10u);
  EXPECT_EQ(stats.hits, 30u);
  EXPECT_EQ(inner->total_reads(), 10);
}

TEST(CachedDataset, BudgetIsAHardBoundAndItemsThatDoNotFitAreReadThroughEveryTime) {
  // 100-byte items, then one of 500 that never fits, then small ones that still do.
  const auto inner = std::make_shared<CountingDataset>(std::vector<std::size_t>{100, 100, 100, 500, 100, 30, 20});
  const CachedDataset cache(inner, 450);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (std::size_t i = 0; i < inner->size(); ++i) {
      expect_item(cache.read(i), i, i == 3 ? 500 : (i == 5 ? 30 : (i == 6 ? 20 : 100)));
      EXPECT_LE(cache.stats().bytes_cached, 450u);
    }
  }
  // Cached: items 0, 1, 2, 4 (400 bytes); 5 (30) fits too; 6 (20) would make 450: fits exactly.
  const CacheStats stats = cache.stats();
  EXPECT_EQ(stats.bytes_cached, 450u);
  EXPECT_EQ(stats.items_cached, 6u);
  EXPECT_EQ(inner->reads(0), 1);
  EXPECT_EQ(inner->reads(3), 3);  // never fits, read every epoch
  EXPECT_EQ(inner->reads(6), 1);
  EXPECT_EQ(stats.misses, 7u + 2u);
  EXPECT_EQ(stats.hits, 3u * 7u - stats.misses);
}

TEST(CachedDataset, ZeroBudgetCachesNothing) {
  const auto inner = std::make_shared<CountingDataset>(std::vector<std::size_t>(3, 10));
  const CachedDataset cache(inner, 0);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (std::size_t i = 0; i < 3; ++i) expect_item(cache.read(i), i, 10);
  }
  EXPECT_EQ(cache.stats().hits, 0u);
  EXPECT_EQ(cache.stats().bytes_cached, 0u);
  EXPECT_EQ(inner->total_reads(), 6);
}

TEST(CachedDataset, ForwardsTheInnerDatasetsDescription) {
  const auto inner = std::make_shared<CountingDataset>(std::vector<std::size_t>(5, 10));
  const CachedDataset cache(inner, 100);
  EXPECT_EQ(cache.size(), 5u);
  EXPECT_EQ(cache.label(3), 3);
  EXPECT_EQ(cache.name(2), "item2");
  EXPECT_EQ(cache.classes(), inner->classes());
  EXPECT_EQ(inner->total_reads(), 0);  // describing reads nothing
  EXPECT_THROW(cache.read(5), std::out_of_range);
  EXPECT_THROW(CachedDataset(nullptr, 10), std::invalid_argument);
}

TEST(CachedDataset, ConcurrentReadsOfTheSameAndDifferentItemsStayCorrectAndBounded) {
  constexpr std::size_t items = 64;
  constexpr std::size_t item_size = 200;
  constexpr std::size_t budget = items / 2 * item_size + 50;  // room for half the items
  const auto inner = std::make_shared<CountingDataset>(std::vector<std::size_t>(items, item_size));
  const CachedDataset cache(inner, budget);

  constexpr int threads = 8;
  constexpr int rounds = 20;
  std::atomic<int> wrong{0};
  std::atomic<bool> over_budget{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        for (std::size_t k = 0; k < items; ++k) {
          // Threads walk in different orders, and all start on item 0 at once.
          const std::size_t i = (k * static_cast<std::size_t>(2 * t + 1)) % items;
          const Sample sample = cache.read(i);
          if (test::to_vector(sample.bytes) != test::distinct_bytes(static_cast<std::uint32_t>(i), item_size) ||
              sample.index != i)
            wrong.fetch_add(1);
          if (cache.stats().bytes_cached > budget) over_budget = true;
        }
      }
    });
  }
  for (std::thread& thread : pool) thread.join();

  CacheStats stats = cache.stats();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_FALSE(over_budget.load());
  EXPECT_EQ(stats.hits + stats.misses, std::uint64_t{threads} * rounds * items);
  EXPECT_EQ(stats.misses, static_cast<std::uint64_t>(inner->total_reads()));
  EXPECT_LE(stats.items_cached, items / 2);

  // Racing threads may each have missed an item that is now cached; a serial pass fills any room
  // left, after which exactly the half that fits is answered from memory.
  for (std::size_t i = 0; i < items; ++i) cache.read(i);
  stats = cache.stats();
  EXPECT_EQ(stats.items_cached, items / 2);
  EXPECT_EQ(stats.bytes_cached, items / 2 * item_size);
  const CacheStats before = stats;
  for (std::size_t i = 0; i < items; ++i) cache.read(i);
  stats = cache.stats();
  EXPECT_EQ(stats.hits - before.hits, items / 2);
  EXPECT_EQ(stats.misses - before.misses, items / 2);
}

}  // namespace
}  // namespace stoke::nodes
