// BlockCache: a given-back block serves the next request of its size class, within the limit.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stoke/base/block_cache.hpp>

namespace stoke::base {
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

// Sizes a workload stopped using give way to the ones it uses now: a full cache frees blocks of
// the least recently used other class to keep a new block, never its own class's.
TEST(BlockCache, AFullCacheMakesRoomByFreeingTheLeastRecentlyUsedClass) {
  constexpr std::size_t a = 10240;  // three classes, each a multiple of 512
  constexpr std::size_t b = 20480;
  constexpr std::size_t c = 5120;
  for (const bool c_first : {true, false}) {
    BlockCache cache(a + b);
    void* ablock = cache.take(a);
    void* bblock = cache.take(b);
    void* cblock = cache.take(c);
    if (c_first) cache.give(cblock, c);
    cache.give(ablock, a);
    if (!c_first) cache.give(cblock, c);
    cache.give(bblock, b);  // a + c + b does not fit: the older of a and c is freed
    const std::size_t kept = c_first ? a : c;
    EXPECT_EQ(cache.cached_bytes(), kept + b) << "c given first: " << c_first;
    EXPECT_EQ(cache.take(b), bblock);
    EXPECT_EQ(cache.take(kept), c_first ? ablock : cblock);
    EXPECT_EQ(cache.reused(), 2u);
    void* fresh = cache.take(c_first ? c : a);  // the freed class: a new block
    EXPECT_EQ(cache.reused(), 2u);
    cache.give(fresh, c_first ? c : a);
    cache.give(bblock, b);
    cache.give(c_first ? ablock : cblock, kept);
  }

  // A class's own blocks never make room for another of the class.
  BlockCache single(2 * a);
  void* x = single.take(a);
  void* y = single.take(a);
  void* z = single.take(a);
  single.give(x, a);
  single.give(y, a);
  single.give(z, a);  // full of its own class: z is freed, x and y stay
  EXPECT_EQ(single.cached_bytes(), 2 * a);
  EXPECT_EQ(single.take(a), y);
  EXPECT_EQ(single.take(a), x);
  EXPECT_EQ(single.reused(), 2u);
  single.give(x, a);
  single.give(y, a);
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
}  // namespace stoke::base
