// The autotuner's policy, fed synthetic stats from a fluid model of a pipeline: deterministic,
// no clocks, no threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "stoke/graph/autotune.hpp"

namespace stoke::graph::test {
namespace {

using std::chrono::nanoseconds;

/// A pipeline as a fluid: stage i needs `cost` seconds of one call per item, runs `concurrency`
/// calls, so it can pass concurrency / cost items/s; the whole passes the least of those, and no
/// more than in_flight / (sum of costs) (Little's law). Stats accumulate as the real ones do.
struct ModelStage {
  std::string name;
  double cost = 0;  // seconds per item per call
  int concurrency = 1;
  int min = 1;
  int max = 1;
  bool scales = true;  // false: more calls do not help (e.g. a lock inside), though it looks busy
};

class FluidPipeline {
 public:
  explicit FluidPipeline(std::vector<ModelStage> stages, std::size_t in_flight)
      : stages_(std::move(stages)), in_flight_(in_flight), stats_(stages_.size()) {
    for (std::size_t i = 0; i < stages_.size(); ++i) stats_[i].name = stages_[i].name;
  }

  /// Runs for `dt` seconds; `noise` scales every cost by a deterministic factor in [1-noise, 1+noise].
  void advance(double dt, double noise = 0) {
    std::vector<double> cost(stages_.size());
    for (std::size_t i = 0; i < stages_.size(); ++i) cost[i] = stages_[i].cost * (1 + noise * next_uniform());
    double rate = 1e18;
    std::size_t bottleneck = 0;
    double latency = 0;
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      const double calls = stages_[i].scales ? stages_[i].concurrency : 1;
      if (calls / cost[i] < rate) {
        rate = calls / cost[i];
        bottleneck = i;
      }
      latency += cost[i];
    }
    const bool credit_bound = static_cast<double>(in_flight_) / latency < rate;
    if (credit_bound) rate = static_cast<double>(in_flight_) / latency;
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      StageStats& s = stats_[i];
      const double calls = stages_[i].concurrency;
      const double busy =
          std::min(rate * cost[i] * (stages_[i].scales ? 1.0 : calls), calls);  // call-seconds per second
      const double idle = 1.0 - std::min(busy / calls, 1.0);
      s.busy += nanoseconds(static_cast<std::int64_t>(busy * dt * 1e9));
      // Before the bottleneck a stage waits for room; after it (or everywhere, when credits are
      // the limit) for input.
      const bool waits_for_input = credit_bound || i > bottleneck;
      (waits_for_input ? s.starved : s.blocked) += nanoseconds(static_cast<std::int64_t>(idle * dt * 1e9));
      items_[i] += rate * dt;
      s.items_out = static_cast<std::uint64_t>(items_[i]);
      s.concurrency = stages_[i].concurrency;
      s.min_concurrency = stages_[i].min;
      s.max_concurrency = stages_[i].max;
    }
    now_ += nanoseconds(static_cast<std::int64_t>(dt * 1e9));
    last_rate_ = rate;
  }

  void apply(const Decision& d) {
    switch (d.kind) {
      case DecisionKind::grow:
      case DecisionKind::shrink:
        stage(d.stage).concurrency = static_cast<int>(d.to);
        break;
      case DecisionKind::grow_in_flight:
      case DecisionKind::shrink_in_flight:
        in_flight_ = d.to;
        break;
    }
  }

  ModelStage& stage(const std::string& name) {
    for (auto& s : stages_)
      if (s.name == name) return s;
    throw std::invalid_argument("no stage " + name);
  }
  const std::vector<StageStats>& stats() const { return stats_; }
  nanoseconds now() const { return now_; }
  std::size_t in_flight() const { return in_flight_; }
  double rate() const { return last_rate_; }
  int threads() const {
    int n = 0;
    for (const auto& s : stages_)
      if (s.max > 1) n += s.concurrency;
    return n;
  }

 private:
  double next_uniform() {  // in [-1, 1], from a fixed LCG
    seed_ = seed_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(seed_ >> 11) / static_cast<double>(1ull << 53) * 2 - 1;
  }

  std::vector<ModelStage> stages_;
  std::size_t in_flight_;
  std::vector<StageStats> stats_;
  std::vector<double> items_ = std::vector<double>(stages_.size(), 0.0);
  nanoseconds now_{0};
  double last_rate_ = 0;
  std::uint64_t seed_ = 42;
};

/// Runs `intervals` of 200 ms: advance the model, observe, apply. Returns every decision.
std::vector<Decision> run(FluidPipeline& model, Autotuner& tuner, int intervals, double noise = 0,
                          int* max_threads = nullptr) {
  std::vector<Decision> all;
  tuner.observe(model.stats(), model.in_flight(), model.now());
  for (int k = 0; k < intervals; ++k) {
    model.advance(0.2, noise);
    for (const Decision& d : tuner.observe(model.stats(), model.in_flight(), model.now())) {
      model.apply(d);
      all.push_back(d);
    }
    if (max_threads) *max_threads = std::max(*max_threads, model.threads());
  }
  return all;
}

/// source -> read -> decode -> batch -> compute, from a bad start (one call everywhere).
FluidPipeline image_pipeline(double decode_cost, double compute_cost, std::size_t in_flight = 256) {
  return FluidPipeline({{"source", 0.00002, 1, 1, 1},
                        {"read", 0.0003, 1, 1, 8},
                        {"decode", decode_cost, 1, 1, 8},
                        {"batch", 0.00005, 1, 1, 1},
                        {"compute", compute_cost, 1, 1, 1}},
                       in_flight);
}

TEST(AutotunePolicy, GrowsTheBottleneckAndNotTheOthers) {
  FluidPipeline model = image_pipeline(/*decode=*/0.004, /*compute=*/0.001);
  Autotuner tuner({.target = "compute", .cpu_budget = 8});
  const std::vector<Decision> decisions = run(model, tuner, 150);
  ASSERT_FALSE(decisions.empty());
  EXPECT_EQ(decisions.front().kind, DecisionKind::grow);
  EXPECT_EQ(decisions.front().stage, "decode") << decisions.front().why;
  EXPECT_GE(model.stage("decode").concurrency, 4) << "decode needs 4 calls to feed 1000 items/s";
  EXPECT_EQ(model.stage("read").concurrency, 1) << "read was never the bottleneck";
  EXPECT_GE(tuner.loads().back().utilization, 0.95) << "compute ends saturated";
  for (const Decision& d : decisions) EXPECT_FALSE(d.why.empty());
}

TEST(AutotunePolicy, StopsAtTheCpuBudget) {
  // Decode would want 10 calls; the budget has room for about 4 cores of work.
  FluidPipeline model = image_pipeline(/*decode=*/0.010, /*compute=*/0.001);
  Autotuner tuner({.target = "compute", .cpu_budget = 4});
  run(model, tuner, 200);
  EXPECT_EQ(model.stage("decode").concurrency, 4) << "one more call fits while half a core is left";
  EXPECT_LE(tuner.cores_in_use(), 4.6);
  EXPECT_EQ(model.stage("read").concurrency, 1);

  FluidPipeline roomier = image_pipeline(/*decode=*/0.010, /*compute=*/0.001);
  Autotuner generous({.target = "compute", .cpu_budget = 8});
  run(roomier, generous, 200);
  EXPECT_GT(roomier.stage("decode").concurrency, 4) << "with a larger budget the same pipeline grows further";
}

TEST(AutotunePolicy, SplitsTheBudgetByCost) {
  // Read costs half what decode does; both need calls, in that proportion, within 6 cores.
  FluidPipeline model({{"source", 0.00002, 1, 1, 1},
                       {"read", 0.003, 1, 1, 8},
                       {"decode", 0.006, 1, 1, 8},
                       {"batch", 0.00005, 1, 1, 1},
                       {"compute", 0.0001, 1, 1, 1}},
                      256);
  Autotuner tuner({.target = "compute", .cpu_budget = 6});
  run(model, tuner, 300);
  const int read = model.stage("read").concurrency;
  const int decode = model.stage("decode").concurrency;
  EXPECT_GE(read, 2);
  EXPECT_GE(decode, 2 * read - 1) << "read " << read << ", decode " << decode;
  EXPECT_LE(decode, 2 * read + 1) << "read " << read << ", decode " << decode;
  EXPECT_LE(tuner.cores_in_use(), 6.6);
}

TEST(AutotunePolicy, GrowsInFlightWithinTheMemoryBudget) {
  // Cheap stages with room to spare but long latency: only more items in flight help.
  FluidPipeline model(
      {{"source", 0.0001, 1, 1, 1}, {"io", 0.002, 8, 1, 8}, {"decode", 0.002, 8, 1, 8}, {"compute", 0.0005, 1, 1, 1}},
      /*in_flight=*/2);
  Autotuner tuner({.target = "compute", .cpu_budget = 16, .memory_budget = 12 * 1024, .item_bytes = 1024});
  const std::vector<Decision> decisions = run(model, tuner, 150);
  EXPECT_GT(model.in_flight(), 2u);
  EXPECT_LE(model.in_flight(), 12u) << "the memory budget allows 12 items";
  for (const Decision& d : decisions) EXPECT_NE(d.kind, DecisionKind::grow) << d.why;
}

TEST(AutotunePolicy, GivesThreadsBackWhenTheTargetIsSaturated) {
  FluidPipeline model = image_pipeline(/*decode=*/0.002, /*compute=*/0.005);  // compute-bound
  model.stage("read").concurrency = 6;
  model.stage("decode").concurrency = 6;
  Autotuner tuner({.target = "compute", .cpu_budget = 12});
  run(model, tuner, 200);
  EXPECT_LT(model.threads(), 12);
  EXPECT_LE(model.stage("read").concurrency, 2);
  EXPECT_GE(tuner.loads().back().utilization, 0.95) << "giving threads back must not starve compute";
}

TEST(AutotunePolicy, FollowsAPhaseChange) {
  FluidPipeline model = image_pipeline(/*decode=*/0.002, /*compute=*/0.001);
  Autotuner tuner({.target = "compute", .cpu_budget = 8});
  run(model, tuner, 100);
  const int settled = model.stage("decode").concurrency;
  EXPECT_GE(tuner.loads().back().utilization, 0.95);

  model.stage("decode").cost = 0.005;  // the augmentation got heavier
  run(model, tuner, 50);               // 10 s
  EXPECT_GT(model.stage("decode").concurrency, settled);
  EXPECT_GE(tuner.loads().back().utilization, 0.95) << "rebalanced within 10 s";

  model.stage("decode").cost = 0.001;  // and lighter again (a cache warmed up)
  const int heavy = model.stage("decode").concurrency;
  run(model, tuner, 100);
  EXPECT_LT(model.stage("decode").concurrency, heavy) << "threads go back once they idle";
  EXPECT_GE(tuner.loads().back().utilization, 0.95);
}

TEST(AutotunePolicy, GrowsInFlightFromOneItem) {
  // Depth 1: one item at a time, so every stage waits on the others and none is saturated.
  FluidPipeline model = image_pipeline(/*decode=*/0.001, /*compute=*/0.0005, /*in_flight=*/1);
  Autotuner tuner({.target = "compute", .cpu_budget = 8, .max_in_flight = 64});
  const std::vector<Decision> decisions = run(model, tuner, 50);
  ASSERT_FALSE(decisions.empty());
  EXPECT_EQ(decisions.front().kind, DecisionKind::grow_in_flight) << decisions.front().why;
  EXPECT_LE(model.in_flight(), 64u);
  EXPECT_GE(tuner.loads().back().utilization, 0.95) << "in flight: " << model.in_flight();
}

TEST(AutotunePolicy, DoesNotOscillateOnNoisyInput) {
  FluidPipeline model = image_pipeline(/*decode=*/0.004, /*compute=*/0.001);
  Autotuner tuner({.target = "compute", .cpu_budget = 8});
  run(model, tuner, 150, /*noise=*/0.15);
  const std::size_t settled = tuner.history().size();
  run(model, tuner, 300, /*noise=*/0.15);
  EXPECT_LE(tuner.history().size() - settled, 4u) << "a settled tuner keeps its setting under 15% noise";
}

TEST(AutotunePolicy, UndoesAMoveThatBuysNothingAndDoesNotRetryIt) {
  FluidPipeline model = image_pipeline(/*decode=*/0.004, /*compute=*/0.001);
  model.stage("decode").scales = false;  // looks busy, but more calls do not help
  Autotuner tuner({.target = "compute", .cpu_budget = 8, .tabu_intervals = 1000});
  const std::vector<Decision> decisions = run(model, tuner, 100);
  ASSERT_GE(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].kind, DecisionKind::grow);
  EXPECT_TRUE(decisions[1].revert) << decisions[1].why;
  EXPECT_EQ(decisions[1].kind, DecisionKind::shrink);
  EXPECT_EQ(model.stage("decode").concurrency, 1);
  int grows = 0;
  for (const Decision& d : decisions) grows += d.kind == DecisionKind::grow && d.stage == "decode";
  EXPECT_EQ(grows, 1) << "the failed move is not tried again";
}

}  // namespace
}  // namespace stoke::graph::test
