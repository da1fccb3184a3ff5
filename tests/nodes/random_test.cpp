// ItemRng and EpochOrder: per-item randomness and per-epoch order are functions of
// (seed, epoch, index) only.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stoke/nodes/dataset.hpp>
#include <stoke/nodes/random.hpp>
#include <vector>

namespace stoke::nodes {
namespace {

TEST(ItemRng, SameKeyGivesSameStream) {
  ItemRng a(42, 3, 1000), b(42, 3, 1000);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a(), b());
}

TEST(ItemRng, EachKeyPartChangesTheStream) {
  const auto first = [](ItemRng r) { return r(); };
  const auto base = first(ItemRng(42, 3, 1000, 0));
  EXPECT_NE(base, first(ItemRng(43, 3, 1000, 0)));
  EXPECT_NE(base, first(ItemRng(42, 4, 1000, 0)));
  EXPECT_NE(base, first(ItemRng(42, 3, 1001, 0)));
  EXPECT_NE(base, first(ItemRng(42, 3, 1000, 1)));
}

TEST(ItemRng, UniformStaysInRangeAndCoversIt) {
  ItemRng rng(7, 0, 0);
  double lo = 1, hi = 0, sum = 0;
  constexpr int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
  }
  EXPECT_LT(lo, 0.001);
  EXPECT_GT(hi, 0.999);
  EXPECT_NEAR(sum / n, 0.5, 0.01);
}

TEST(ItemRng, UniformIntIsInclusiveOnBothEnds) {
  ItemRng rng(7, 0, 0);
  std::set<std::int64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const auto v = rng.uniform_int(-2, 2);
    ASSERT_GE(v, -2);
    ASSERT_LE(v, 2);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 5u);
}

TEST(EpochOrder, ShuffleIsAPermutationThatChangesWithTheEpoch) {
  EpochOrder order(1000, {.shuffle = true, .seed = 5});
  auto e0 = order.indices(0), e1 = order.indices(1);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, order.indices(0));
  std::sort(e0.begin(), e0.end());
  for (std::uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(e0[i], i);
}

TEST(EpochOrder, NoShuffleIsIdentity) {
  EpochOrder order(5, {.shuffle = false});
  EXPECT_EQ(order.indices(3), (std::vector<std::uint64_t>{0, 1, 2, 3, 4}));
}

TEST(EpochOrder, RanksPartitionEveryEpoch) {
  constexpr std::size_t size = 1003;
  constexpr std::uint32_t world = 4;
  for (std::uint32_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int> seen(size, 0);
    std::size_t total = 0;
    for (std::uint32_t rank = 0; rank < world; ++rank) {
      EpochOrder order(size, {.shuffle = true, .seed = 9, .rank = rank, .world = world});
      const auto mine = order.indices(epoch);
      EXPECT_EQ(mine.size(), order.per_epoch());
      total += mine.size();
      for (auto i : mine) ++seen[i];
    }
    EXPECT_EQ(total, size);
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; })) << "epoch " << epoch;
  }
}

TEST(EpochOrder, RejectsBadRank) {
  EXPECT_THROW(EpochOrder(10, {.rank = 2, .world = 2}), std::invalid_argument);
  EXPECT_THROW(EpochOrder(10, {.world = 0}), std::invalid_argument);
}

TEST(DatasetSource, RunsTheGivenEpochsInOrder) {
  DatasetSource source(3, {.shuffle = false}, /*epochs=*/2, /*first_epoch=*/5);
  std::vector<std::pair<std::uint64_t, std::uint32_t>> got;
  while (auto ref = source()) got.emplace_back(ref->index, ref->epoch);
  EXPECT_EQ(got,
            (std::vector<std::pair<std::uint64_t, std::uint32_t>>{{0, 5}, {1, 5}, {2, 5}, {0, 6}, {1, 6}, {2, 6}}));
}

TEST(DatasetSource, ZeroEpochsRepeatsForever) {
  DatasetSource source(2, {.shuffle = true, .seed = 1}, /*epochs=*/0);
  for (int i = 0; i < 100; ++i) {
    auto ref = source();
    ASSERT_TRUE(ref.has_value());
    EXPECT_EQ(ref->epoch, static_cast<std::uint32_t>(i / 2));
  }
}

TEST(DatasetSource, EmptyDatasetEnds) {
  DatasetSource forever(0, {}, 0), once(0, {}, 1);
  EXPECT_FALSE(forever().has_value());
  EXPECT_FALSE(once().has_value());
}

}  // namespace
}  // namespace stoke::nodes
