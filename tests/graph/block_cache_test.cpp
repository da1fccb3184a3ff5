// BlockCache: a given-back block serves the next request of its size class, within the limit.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stoke/graph/block_cache.hpp>

namespace stoke::graph {
namespace {

TEST(BlockCache, SizeClassesAreMultiplesOf512BelowAMebibyteAndQuarterOctavesAbove) {
  EXPECT_EQ(BlockCache::bin_size(0), 512u);
  EXPECT_EQ(BlockCache::bin_size(1), 512u);
  EXPECT_EQ(BlockCache::bin_size(602112), 602112u);  // 224 x 224 x 3 floats: already a multiple
  EXPECT_EQ(BlockCache::bin_size(602113), 602624u);
  EXPECT_EQ(BlockCache::bin_size((1u << 20) + 1), (1u << 20) + (1u << 18));
  EXPECT_EQ(BlockCache::bin_size(3u << 20), 3u << 20);
}

TEST(BlockCache, AGivenBackBlockServesTheNextRequestOfItsClass) {
  BlockCache cache(1 << 20);
  void* block = cache.take(10000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(block) % 64, 0u);
  cache.give(block, 10000);
  EXPECT_EQ(cache.cached_bytes(), BlockCache::bin_size(10000));
  void* other_class = cache.take(20000);
  EXPECT_EQ(cache.reused(), 0u);
  void* again = cache.take(10100);  // the same class as 10000
  EXPECT_EQ(again, block);
  EXPECT_EQ(cache.reused(), 1u);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  cache.give(again, 10100);
  cache.give(other_class, 20000);
}

TEST(BlockCache, KeepsNoMoreThanItsLimit) {
  BlockCache cache(15000);
  void* a = cache.take(10000);
  void* b = cache.take(10000);
  cache.give(a, 10000);
  cache.give(b, 10000);  // no room for a second: freed
  EXPECT_EQ(cache.cached_bytes(), BlockCache::bin_size(10000));
}

TEST(BlockCache, TrimFreesWhatItKept) {
  BlockCache cache(1 << 20);
  cache.give(cache.take(4096), 4096);
  cache.give(cache.take(8192), 8192);
  EXPECT_EQ(cache.cached_bytes(), 4096u + 8192u);
  cache.trim();
  EXPECT_EQ(cache.cached_bytes(), 0u);
  cache.give(cache.take(4096), 4096);  // and keeps again
  EXPECT_EQ(cache.cached_bytes(), 4096u);
  EXPECT_EQ(cache.reused(), 0u);
}

}  // namespace
}  // namespace stoke::graph
