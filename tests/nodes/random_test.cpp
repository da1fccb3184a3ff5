// ItemRng and EpochOrder: per-item randomness and per-epoch order are functions of
// (seed, epoch, index) only.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
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

// ---- by groups (a tar dataset's shards): starts 0, 4, 7, 12, 13 over 20 items
Groups five_groups(std::uint32_t window) {
  return {std::make_shared<const std::vector<std::uint64_t>>(std::vector<std::uint64_t>{0, 4, 7, 12, 13}), window};
}
std::uint64_t group_of(std::uint64_t item) { return item < 4 ? 0 : item < 7 ? 1 : item < 12 ? 2 : item < 13 ? 3 : 4; }

TEST(EpochOrder, AWindowVisitsTheGroupsThatManyAtATimeEachWindowShuffled) {
  const EpochOrder order(20, {.shuffle = true, .seed = 4, .groups = five_groups(2)});
  const std::vector<std::uint64_t> items = order.indices(0);
  std::vector<std::uint64_t> sorted = items;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint64_t i = 0; i < 20; ++i) ASSERT_EQ(sorted[i], i) << "a permutation";
  // Windows of two groups (the last of one): each window's items are all the items of its groups.
  std::set<std::uint64_t> seen, window;
  std::map<std::uint64_t, int> left = {{0, 4}, {1, 3}, {2, 5}, {3, 1}, {4, 7}};
  int windows = 0;
  for (const std::uint64_t item : items) {
    const std::uint64_t group = group_of(item);
    if (!window.contains(group)) {
      if (window.size() == 2) {
        for (const std::uint64_t done : window) EXPECT_EQ(left[done], 0) << "group " << done << " left unfinished";
        window.clear();
      }
      EXPECT_FALSE(seen.contains(group)) << "group " << group << " comes back";
      if (window.empty()) ++windows;
      window.insert(group);
      seen.insert(group);
    }
    --left[group];
  }
  EXPECT_EQ(windows, 3);
  EXPECT_NE(items, order.indices(1)) << "each epoch another order";
  EXPECT_EQ(items, EpochOrder(20, {.shuffle = true, .seed = 4, .groups = five_groups(2)}).indices(0));
  // Within a window the items are shuffled together, not group after group (over a few epochs).
  bool interleaved = false;
  for (std::uint32_t epoch = 0; epoch < 8 && !interleaved; ++epoch) {
    const std::vector<std::uint64_t> e = order.indices(epoch);
    for (std::size_t k = 2; k < e.size(); ++k)
      interleaved |= group_of(e[k - 2]) == group_of(e[k]) && group_of(e[k - 1]) != group_of(e[k]);
  }
  EXPECT_TRUE(interleaved);
}

TEST(EpochOrder, GroupsChangeNothingWithoutAWindowOrAShuffle) {
  const EpochOrder plain(20, {.shuffle = true, .seed = 4});
  EXPECT_EQ(EpochOrder(20, {.shuffle = true, .seed = 4, .groups = five_groups(0)}).indices(3), plain.indices(3));
  const std::vector<std::uint64_t> in_order = EpochOrder(20, {.shuffle = false, .groups = five_groups(2)}).indices(0);
  EXPECT_TRUE(std::is_sorted(in_order.begin(), in_order.end()));
}

TEST(EpochOrder, RanksPartitionAnOrderByGroups) {
  for (const std::uint32_t world : {2u, 3u}) {
    std::vector<std::uint64_t> all;
    for (std::uint32_t rank = 0; rank < world; ++rank) {
      const EpochOrder order(20, {.shuffle = true, .seed = 2, .rank = rank, .world = world, .groups = five_groups(2)});
      const std::vector<std::uint64_t> mine = order.indices(1);
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all.size(), 20u);
    EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end()) << "no item twice";
  }
}

TEST(EpochOrder, GroupStartsThatDoNotRiseFromZeroAreRefused) {
  const auto starts = [](std::vector<std::uint64_t> s) {
    return Groups{std::make_shared<const std::vector<std::uint64_t>>(std::move(s)), 2};
  };
  EXPECT_THROW(EpochOrder(10, {.groups = starts({1, 4})}), std::invalid_argument);
  EXPECT_THROW(EpochOrder(10, {.groups = starts({0, 4, 4})}), std::invalid_argument);
  EXPECT_THROW(EpochOrder(10, {.groups = starts({0, 10})}), std::invalid_argument);
  EXPECT_NO_THROW(EpochOrder(10, {.groups = starts({0, 9})}));
}

// A dataset that records what it is told of the coming reads.
class Planned final : public Dataset {
 public:
  std::size_t size() const noexcept override { return 6; }
  int label(std::size_t) const override { return 0; }
  std::string name(std::size_t i) const override { return std::to_string(i); }
  Sample read(std::size_t) const override { return {}; }
  std::shared_ptr<const void> will_read(std::span<const std::uint64_t> items) const override {
    told.emplace_back(items.begin(), items.end());
    const std::size_t plan = told.size() - 1;
    return std::shared_ptr<const void>(nullptr, [this, plan](const void*) { dropped.push_back(plan); });
  }
  mutable std::vector<std::vector<std::uint64_t>> told;
  mutable std::vector<std::size_t> dropped;  // plans whose handle is gone
};

TEST(DatasetSource, TellsTheDatasetTheRestOfAnEpochAndTheNextAsItStartsIt) {
  const auto dataset = std::make_shared<const Planned>();
  {
    DatasetSource source(dataset, {.shuffle = false}, /*epochs=*/2);
    EXPECT_EQ(source.skip(4), 4u) << "a resume inside the first epoch";
    EXPECT_TRUE(dataset->told.empty()) << "skipping tells nothing";
    std::vector<std::uint64_t> got;
    while (auto ref = source()) got.push_back(ref->index);
    EXPECT_EQ(got, (std::vector<std::uint64_t>{4, 5, 0, 1, 2, 3, 4, 5}));
    EXPECT_EQ(dataset->told, (std::vector<std::vector<std::uint64_t>>{{4, 5}, {0, 1, 2, 3, 4, 5}}))
        << "the first epoch's rest and the second, at the first item; nothing after the last epoch";
    EXPECT_TRUE(dataset->dropped.empty());
  }
  EXPECT_EQ(dataset->dropped.size(), 2u) << "the source's plans end with it";
  DatasetSource past(dataset, {.shuffle = false}, /*epochs=*/1);
  EXPECT_EQ(past.skip(10), 6u);
  EXPECT_FALSE(past().has_value());
}

TEST(DatasetSource, DropsAnEpochsPlanTwoEpochsLater) {
  const auto dataset = std::make_shared<const Planned>();
  DatasetSource source(dataset, {.shuffle = true, .seed = 1}, /*epochs=*/0);
  for (int i = 0; i < 6 * 3 + 1; ++i) ASSERT_TRUE(source().has_value());  // the first item of epoch 3
  ASSERT_EQ(dataset->told.size(), 5u) << "epochs 0 to 4";
  EXPECT_EQ(dataset->told[1], EpochOrder(6, {.shuffle = true, .seed = 1}).indices(1));
  EXPECT_EQ(dataset->dropped, (std::vector<std::size_t>{0, 1})) << "epochs 0 and 1";
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
