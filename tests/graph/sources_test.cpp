// Several sources as one (sources.hpp): mixed by weight in the stated proportions, the same stream
// from the same seed, resumed exactly, and what happens when one runs out; interleave and zip.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "stoke/graph/graph.hpp"
#include "stoke/graph/sources.hpp"
#include "test_support.hpp"

namespace stoke::graph::test {
namespace {

/// Items tag * 1'000'000 + i for i < n: which source an item came from, and its place there.
auto tagged(std::uint64_t tag, std::uint64_t n) {
  return [tag, n, i = std::uint64_t{0}]() mutable -> std::optional<std::uint64_t> {
    if (i == n) return std::nullopt;
    return tag * 1'000'000 + i++;
  };
}

template <class F>
std::vector<std::uint64_t> drain(F source, std::size_t limit = 1'000'000) {
  std::vector<std::uint64_t> out;
  while (out.size() < limit) {
    auto item = source();
    if (!item) break;
    out.push_back(*item);
  }
  return out;
}

TEST(Mix, GivesTheStatedProportions) {
  auto mixed = mix({.weights = {5, 3, 2}, .seed = 7}, tagged(0, 1'000'000), tagged(1, 1'000'000), tagged(2, 1'000'000));
  const auto items = drain(std::ref(mixed), 20000);
  std::uint64_t counts[3] = {};
  for (const auto item : items) ++counts[item / 1'000'000];
  EXPECT_NEAR(counts[0] / 20000.0, 0.5, 0.015);
  EXPECT_NEAR(counts[1] / 20000.0, 0.3, 0.015);
  EXPECT_NEAR(counts[2] / 20000.0, 0.2, 0.015);
  EXPECT_EQ(mixed.taken()[0], counts[0]);
  EXPECT_EQ(mixed.position(), 20000u);
  // Each source's items come in its own order.
  std::uint64_t next[3] = {};
  for (const auto item : items) EXPECT_EQ(item % 1'000'000, next[item / 1'000'000]++);
}

TEST(Mix, TheSameSeedGivesTheSameStreamAndAnotherSeedAnother) {
  const auto run = [](std::uint64_t seed) {
    return drain(mix({.weights = {1, 1}, .seed = seed}, tagged(0, 500), tagged(1, 500)), 300);
  };
  EXPECT_EQ(run(3), run(3));
  EXPECT_NE(run(3), run(4));
}

TEST(Mix, ResumesExactlyWhereARunStopped) {
  const MixOptions options{.weights = {2, 1, 1}, .seed = 11, .on_exhausted = OnExhausted::continue_with_rest};
  const auto whole = drain(mix(options, tagged(0, 300), tagged(1, 50), tagged(2, 400)));
  ASSERT_EQ(whole.size(), 750u);
  for (const std::uint64_t start : {std::uint64_t{1}, std::uint64_t{137}, std::uint64_t{600}}) {
    MixOptions resumed = options;
    resumed.start = start;
    const auto rest = drain(mix(resumed, tagged(0, 300), tagged(1, 50), tagged(2, 400)));
    EXPECT_EQ(rest, std::vector<std::uint64_t>(whole.begin() + static_cast<std::ptrdiff_t>(start), whole.end()))
        << "resumed at " << start;
  }
}

TEST(Mix, WhenASourceRunsOutItStopsOrGoesOnAsAsked) {
  const auto stopped = drain(mix({.weights = {1, 1}, .seed = 5}, tagged(0, 10), tagged(1, 1000)));
  EXPECT_LT(stopped.size(), 100u) << "stop: the stream ends when the short source runs out";
  std::uint64_t from_short = 0;
  for (const auto item : stopped) from_short += item < 1'000'000 ? 1 : 0;
  EXPECT_EQ(from_short, 10u);

  const auto continued =
      drain(mix({.weights = {1, 1}, .seed = 5, .on_exhausted = OnExhausted::continue_with_rest}, tagged(0, 10),
                tagged(1, 1000)));
  EXPECT_EQ(continued.size(), 1010u) << "continue_with_rest: every item of both";
}

TEST(Mix, BadWeightsAreRefusedNamingThem) {
  EXPECT_THROW(mix({.weights = {1}}, tagged(0, 1), tagged(1, 1)), std::invalid_argument);
  try {
    mix({.weights = {1, -2}}, tagged(0, 1), tagged(1, 1));
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_TRUE(contains(error.what(), "weights[1] must be finite and > 0")) << error.what();
  }
}

TEST(Interleave, TakesTurnsAndPassesOverAnExhaustedSource) {
  const auto turns = drain(interleave(OnExhausted::continue_with_rest, tagged(0, 2), tagged(1, 4)));
  EXPECT_EQ(turns, (std::vector<std::uint64_t>{0, 1'000'000, 1, 1'000'001, 1'000'002, 1'000'003}));
  const auto stopped = drain(interleave(OnExhausted::stop, tagged(0, 2), tagged(1, 4)));
  EXPECT_EQ(stopped, (std::vector<std::uint64_t>{0, 1'000'000, 1, 1'000'001}));
}

TEST(Zip, PairsItemsByPositionUntilTheShortestEnds) {
  auto pairs = zip(tagged(0, 3), tagged(1, 5));
  std::vector<std::tuple<std::uint64_t, std::uint64_t>> out;
  while (auto item = pairs()) out.push_back(*item);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2], std::make_tuple(std::uint64_t{2}, std::uint64_t{1'000'002}));
  EXPECT_FALSE(pairs().has_value());
}

// In a pipeline: one source stage, so one credit per item whatever its stream; the sink sees the
// mixed stream in order.
TEST(Mix, AsAPipelinesSource) {
  const MixOptions options{.weights = {3, 1}, .seed = 1, .on_exhausted = OnExhausted::continue_with_rest};
  std::vector<std::uint64_t> seen;
  Pipeline pipe({.max_in_flight = 8, .threads = 4});
  pipe.source("mixed", mix(options, tagged(0, 300), tagged(1, 100)))
      .map("work", [](std::uint64_t v) { return v; }, {.concurrency = parallel(4), .ordered = true})
      .sink("collect", [&](std::uint64_t v) { seen.push_back(v); }, {.ordered = true});
  pipe.run();
  EXPECT_EQ(seen, drain(mix(options, tagged(0, 300), tagged(1, 100))));
}

}  // namespace
}  // namespace stoke::graph::test
