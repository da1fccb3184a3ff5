// Sync batch norm (Context::batch_norm_sync) on the CPU: two replicas simulated by two threads of
// one process, each with its own BatchNorm2d and half of a batch, summing through an in-process
// ReplicaSum, against one BatchNorm2d that sees the whole batch without sync. Outputs, running
// statistics, input gradients and parameter gradients must agree (in NCHW, NHWC and bf16, with
// equal and unequal shares); without sync each replica normalises its own half, which differs.
//
// The halves are drawn with different means and scales per channel, so a replica's own statistics
// are far from the whole batch's: a layer that ignored the sync would fail every comparison here
// by O(1), not by rounding.
//
// Tolerance: the reference kernel sums in float blocks and keeps its statistics in f32; the sync
// path sums in double. Both are within a few f32 ulps of the exact values, so the comparisons use
// |actual - expected| <= 1e-5 * (1 + |expected|) (about 1e-5 relative for the values of O(1) here).
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/batch_norm.hpp>
#include <stoke/nn/replicas.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <thread>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"

namespace stoke::nn {
namespace {

using testing::random_tensor;

constexpr double kTolerance = 1e-5;  // relative, see the top of the file

// ReplicaSum for replicas that are threads of this process: each sum() call posts its array,
// waits for the others, and adds all the arrays in replica order, so every replica gets the same
// total bit for bit. Records the length of each call of each replica.
class InProcessReplicas {
 public:
  explicit InProcessReplicas(int replicas)
      : barrier_(replicas), slots_(static_cast<std::size_t>(replicas)), calls_(static_cast<std::size_t>(replicas)) {
    for (int r = 0; r < replicas; ++r) members_.push_back(std::make_unique<Member>(*this, r));
  }

  ReplicaSum& member(int replica) { return *members_.at(static_cast<std::size_t>(replica)); }
  int replicas() const noexcept { return static_cast<int>(members_.size()); }
  /// The lengths of the arrays replica `r` summed, call by call.
  std::vector<std::size_t> calls(int replica) const {
    std::lock_guard lock(mutex_);
    return calls_.at(static_cast<std::size_t>(replica));
  }

 private:
  class Member final : public ReplicaSum {
   public:
    Member(InProcessReplicas& group, int replica) : group_(group), replica_(replica) {}
    void sum(std::span<double> values) override { group_.sum(replica_, values); }

   private:
    InProcessReplicas& group_;
    int replica_;
  };

  void sum(int replica, std::span<double> values) {
    {
      std::lock_guard lock(mutex_);
      calls_[static_cast<std::size_t>(replica)].push_back(values.size());
      slots_[static_cast<std::size_t>(replica)].assign(values.begin(), values.end());
    }
    barrier_.arrive_and_wait();  // every replica's array is posted
    {
      std::lock_guard lock(mutex_);
      std::fill(values.begin(), values.end(), 0.0);
      for (const std::vector<double>& slot : slots_) {
        if (slot.size() != values.size()) throw std::logic_error("InProcessReplicas: the replicas' lengths differ");
        for (std::size_t i = 0; i < values.size(); ++i) values[i] += slot[i];
      }
    }
    barrier_.arrive_and_wait();  // every replica has read the slots: the next call may overwrite them
  }

  std::barrier<> barrier_;
  mutable std::mutex mutex_;
  std::vector<std::vector<double>> slots_;
  std::vector<std::vector<std::size_t>> calls_;
  std::vector<std::unique_ptr<Member>> members_;
};

// Runs body(r) for each replica r on a thread of its own; rethrows the first exception.
void run_replicas(int replicas, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(replicas));
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// A batch {n, c, h, w} whose items from `second_from` on have other per-channel means and scales
// than the ones before: each share's statistics are far from the whole batch's.
Tensor two_population_batch(const Shape& shape, std::int64_t second_from, std::uint64_t seed) {
  Tensor x = random_tensor(shape, seed);
  const std::int64_t c = shape[1];
  const std::int64_t hw = shape[2] * shape[3];
  const auto v = x.f32();
  for (std::int64_t i = 0; i < shape[0]; ++i) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const bool second = i >= second_from;
      const double scale = (1.0 + 0.5 * static_cast<double>(ch)) * (second ? 3.0 : 1.0);
      const double shift = second ? -1.0 - static_cast<double>(ch) : 2.0 + static_cast<double>(ch);
      for (std::int64_t k = 0; k < hw; ++k) {
        float& e = v[static_cast<std::size_t>((i * c + ch) * hw + k)];
        e = static_cast<float>(static_cast<double>(e) * scale + shift);
      }
    }
  }
  return x;
}

// Items [first, last) of a host f32 NCHW tensor, copied, times `factor`.
Tensor items(const Tensor& t, std::int64_t first, std::int64_t last, float factor = 1) {
  Shape shape = t.shape();
  shape[0] = last - first;
  Tensor out(shape);
  const std::int64_t per_item = t.numel() / t.dim(0);
  const auto in = t.f32();
  std::transform(in.begin() + first * per_item, in.begin() + last * per_item, out.f32().begin(),
                 [&](float e) { return e * factor; });
  return out;
}

// A tensor's values as host floats in NCHW order, whatever its layout and float dtype.
std::vector<float> nchw_values(const Tensor& t) {
  if (t.rank() != 4 || t.layout() == TensorLayout::nchw) return t.to_vector();
  Tensor wide(t.shape(), DType::f32, Device::cpu(), t.layout());
  make_backend(Device::cpu())->cast(t, wide);
  return to_layout(wide, TensorLayout::nchw).to_vector();
}

// |actual - expected| <= tolerance * (1 + |expected|) element by element, `actual` times `factor`
// compared (the exact relation being tested, e.g. dx_replica == 2 dx_full).
void expect_close(const std::vector<float>& actual, const std::vector<float>& expected, double tolerance,
                  const std::string& what, double factor = 1) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double e = static_cast<double>(expected[i]) * factor;
    ASSERT_NEAR(static_cast<double>(actual[i]), e, tolerance * (1 + std::abs(e))) << what << " element " << i;
  }
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double most = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    most = std::max(most, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return most;
}

std::vector<float> concatenated(const std::vector<std::vector<float>>& parts) {
  std::vector<float> all;
  for (const std::vector<float>& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

BatchNorm2dOptions options_for(std::int64_t channels) { return {.channels = channels, .momentum = 0.3}; }

// Gamma and beta away from 1 and 0, the same in every layer made for `channels`.
void set_parameters(BatchNorm2d& bn, std::int64_t channels) {
  const Tensor gamma = random_tensor({channels}, 91, 0.5, 1.5);
  const Tensor beta = random_tensor({channels}, 92);
  std::copy(gamma.f32().begin(), gamma.f32().end(), bn.gamma().value.f32().begin());
  std::copy(beta.f32().begin(), beta.f32().end(), bn.beta().value.f32().begin());
}

// One BatchNorm2d's training step: its output, input gradient, parameter gradients and running
// statistics (host floats, NCHW order).
struct Step {
  std::vector<float> y;
  std::vector<float> dx;
  std::vector<float> dgamma;
  std::vector<float> dbeta;
  std::vector<float> running_mean;
  std::vector<float> running_var;
};

Step train_step(BatchNorm2d& bn, const Tensor& x, const Tensor& dy, Context& ctx) {
  Step s;
  s.y = nchw_values(bn.forward(x, ctx));
  s.running_mean = bn.running_mean().to_vector();
  s.running_var = bn.running_var().to_vector();
  s.dx = nchw_values(bn.backward(dy, ctx));
  s.dgamma = bn.gamma().grad.to_vector();
  s.dbeta = bn.beta().grad.to_vector();
  return s;
}

// The whole batch through one BatchNorm2d on the CPU backend, without sync.
Step full_batch_step(std::int64_t channels, const Tensor& x, const Tensor& dy) {
  testing::CpuFixture f;
  BatchNorm2d bn(options_for(channels));
  set_parameters(bn, channels);
  return train_step(bn, x, dy, f.ctx);
}

// One BatchNorm2d per replica, replica r fed xs[r] and dys[r] on a CPU backend of its own, with
// `sum` as its batch_norm_sync (none when null).
std::vector<Step> replica_steps(std::int64_t channels, const std::vector<Tensor>& xs, const std::vector<Tensor>& dys,
                                InProcessReplicas* sum) {
  const int replicas = static_cast<int>(xs.size());
  std::vector<Step> steps(xs.size());
  run_replicas(replicas, [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    testing::CpuFixture f;
    f.ctx.batch_norm_sync = sum != nullptr ? &sum->member(r) : nullptr;
    BatchNorm2d bn(options_for(channels));
    set_parameters(bn, channels);
    steps[i] = train_step(bn, xs[i], dys[i], f.ctx);
  });
  return steps;
}

// Expects the two replicas' synced step to be the full batch's (items split at `split`), with
// replica r's dy being `dy_factor` times the full batch's dy for its items.
void expect_matches_full_batch(const std::vector<Step>& replicas, const Step& full, double dy_factor,
                               double tolerance) {
  expect_close(concatenated({replicas[0].y, replicas[1].y}), full.y, tolerance, "y");
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    SCOPED_TRACE("replica " + std::to_string(r));
    expect_close(replicas[r].running_mean, full.running_mean, tolerance, "running_mean");
    expect_close(replicas[r].running_var, full.running_var, tolerance, "running_var");
  }
  // dx is linear in dy, and the global sums of dy scale with it: dx_replica == factor dx_full.
  expect_close(concatenated({replicas[0].dx, replicas[1].dx}), full.dx, tolerance, "dx", dy_factor);
  // Each replica's parameter gradients are its own items' sums: their sum over the replicas is
  // factor times the full batch's (the average, what the Trainer steps with, is the full batch's
  // when factor == the number of replicas).
  std::vector<float> dgamma(full.dgamma.size());
  std::vector<float> dbeta(full.dbeta.size());
  for (std::size_t k = 0; k < dgamma.size(); ++k) {
    dgamma[k] = replicas[0].dgamma[k] + replicas[1].dgamma[k];
    dbeta[k] = replicas[0].dbeta[k] + replicas[1].dbeta[k];
  }
  expect_close(dgamma, full.dgamma, tolerance, "dgamma summed over the replicas", dy_factor);
  expect_close(dbeta, full.dbeta, tolerance, "dbeta summed over the replicas", dy_factor);
}

TEST(SyncBatchNorm2d, TwoReplicasOfHalfABatchMatchOneLayerOnTheWholeBatch) {
  // N = 8 split 4 + 4. Each replica's loss is the mean over its own 4 items, so its dy is twice
  // the full batch's (a mean over 8) for the same items: dx_r == 2 dx_full for its items, and
  // dgamma_0 + dgamma_1 == 2 dgamma_full (their average, after the gradient all-reduce, is the
  // full batch's). Likewise dbeta.
  for (const std::int64_t channels : {std::int64_t{3}, std::int64_t{5}}) {
    SCOPED_TRACE("C = " + std::to_string(channels));
    const Shape shape{8, channels, 5, 5};
    const Tensor x = two_population_batch(shape, 4, 11);
    const Tensor dy = random_tensor(shape, 12);
    const Step full = full_batch_step(channels, x, dy);

    InProcessReplicas sum(2);
    const std::vector<Step> synced =
        replica_steps(channels, {items(x, 0, 4), items(x, 4, 8)}, {items(dy, 0, 4, 2), items(dy, 4, 8, 2)}, &sum);
    expect_matches_full_batch(synced, full, 2, kTolerance);
    // One sum per forward ({count, sums, sums of squares}) and one per backward ({sum(dy),
    // sum(dy * xhat)}) on each replica.
    const auto c = static_cast<std::size_t>(channels);
    for (int r = 0; r < 2; ++r) EXPECT_EQ(sum.calls(r), (std::vector<std::size_t>{1 + 2 * c, 2 * c})) << r;
  }
}

TEST(SyncBatchNorm2d, WithoutSyncEachReplicaNormalisesItsOwnHalfAsBefore) {
  // The same replicas with no batch_norm_sync: each is a plain BatchNorm2d of its half, bit for
  // bit, and far from the synced result (the halves' statistics differ), which shows the
  // comparisons of the test above can fail.
  const std::int64_t channels = 3;
  const Shape shape{8, channels, 5, 5};
  const Tensor x = two_population_batch(shape, 4, 11);
  const Tensor dy = random_tensor(shape, 12);
  const std::vector<Tensor> xs{items(x, 0, 4), items(x, 4, 8)};
  const std::vector<Tensor> dys{items(dy, 0, 4, 2), items(dy, 4, 8, 2)};

  const std::vector<Step> alone = replica_steps(channels, xs, dys, nullptr);
  InProcessReplicas sum(2);
  const std::vector<Step> synced = replica_steps(channels, xs, dys, &sum);
  for (std::size_t r = 0; r < 2; ++r) {
    SCOPED_TRACE("replica " + std::to_string(r));
    const Step own = full_batch_step(channels, xs[r], dys[r]);
    EXPECT_EQ(alone[r].y, own.y);
    EXPECT_EQ(alone[r].dx, own.dx);
    EXPECT_EQ(alone[r].dgamma, own.dgamma);
    EXPECT_EQ(alone[r].dbeta, own.dbeta);
    EXPECT_EQ(alone[r].running_mean, own.running_mean);
    EXPECT_EQ(alone[r].running_var, own.running_var);
    EXPECT_GT(max_difference(alone[r].y, synced[r].y), 0.5);
    EXPECT_GT(max_difference(alone[r].running_mean, synced[r].running_mean), 0.1);
    EXPECT_GT(max_difference(alone[r].dx, synced[r].dx), 0.1);
  }
  EXPECT_TRUE(sum.calls(0).size() == 2 && sum.calls(1).size() == 2);
}

TEST(SyncBatchNorm2d, UnequalSharesAreWeightedByTheirCounts) {
  // N = 8 split 3 + 5, each replica given the full batch's dy for its items (a loss summed, not
  // averaged, over the items): dx and the summed parameter gradients are the full batch's.
  const std::int64_t channels = 4;
  const Shape shape{8, channels, 3, 5};
  const Tensor x = two_population_batch(shape, 3, 21);
  const Tensor dy = random_tensor(shape, 22);
  const Step full = full_batch_step(channels, x, dy);
  InProcessReplicas sum(2);
  const std::vector<Step> synced =
      replica_steps(channels, {items(x, 0, 3), items(x, 3, 8)}, {items(dy, 0, 3), items(dy, 3, 8)}, &sum);
  expect_matches_full_batch(synced, full, 1, kTolerance);
}

TEST(SyncBatchNorm2d, AReplicaMayHoldOneValuePerChannelWhenTheReplicasHoldMore) {
  // Alone, a {1, C, 1, 1} batch cannot train (no variance); synced with another, it can.
  const std::int64_t channels = 3;
  const Shape shape{2, channels, 1, 1};
  const Tensor x = two_population_batch(shape, 1, 31);
  const Tensor dy = random_tensor(shape, 32);
  const Step full = full_batch_step(channels, x, dy);
  InProcessReplicas sum(2);
  const std::vector<Step> synced =
      replica_steps(channels, {items(x, 0, 1), items(x, 1, 2)}, {items(dy, 0, 1), items(dy, 1, 2)}, &sum);
  expect_matches_full_batch(synced, full, 1, kTolerance);
}

TEST(SyncBatchNorm2d, ChannelsLastReplicasMatchTheWholeBatchInNchw) {
  // The sync path computes on the host in either layout; the reference is the NCHW full batch.
  const std::int64_t channels = 5;
  const Shape shape{8, channels, 5, 5};
  const Tensor x = two_population_batch(shape, 4, 41);
  const Tensor dy = random_tensor(shape, 42);
  const Step full = full_batch_step(channels, x, dy);
  const auto nhwc = [](const Tensor& t) { return to_layout(t, TensorLayout::nhwc); };
  InProcessReplicas sum(2);
  const std::vector<Step> synced = replica_steps(channels, {nhwc(items(x, 0, 4)), nhwc(items(x, 4, 8))},
                                                 {nhwc(items(dy, 0, 4, 2)), nhwc(items(dy, 4, 8, 2))}, &sum);
  expect_matches_full_batch(synced, full, 2, kTolerance);
}

TEST(SyncBatchNorm2d, Bf16ReplicasMatchTheWholeBatchWithinBf16Rounding) {
  // bf16 x and dy are widened to f32 by the backend and y and dx rounded back to bf16 (8
  // significant bits: relative rounding 2^-9, so 1e-2 bounds it with room for the inputs'
  // rounding carried through); the parameter gradients stay f32. The reference is the f32 full
  // batch on the same bf16-rounded values.
  const std::int64_t channels = 3;
  const Shape shape{8, channels, 4, 4};
  const std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
  const auto bf16 = [&](const Tensor& t) {
    Tensor half(t.shape(), DType::bf16);
    cpu->cast(t, half);
    return half;
  };
  const auto widened = [&](const Tensor& t) {
    Tensor wide(t.shape());
    cpu->cast(t, wide);
    return wide;
  };
  const Tensor x = widened(bf16(two_population_batch(shape, 4, 51)));
  const Tensor dy = widened(bf16(random_tensor(shape, 52)));
  const Step full = full_batch_step(channels, x, dy);

  InProcessReplicas sum(2);
  std::vector<Step> synced(2);
  run_replicas(2, [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    testing::CpuFixture f;
    f.ctx.batch_norm_sync = &sum.member(r);
    BatchNorm2d bn(options_for(channels));
    set_parameters(bn, channels);
    const Tensor y = bn.forward(bf16(items(x, 4 * r, 4 * r + 4)), f.ctx);
    const Tensor dx = bn.backward(bf16(items(dy, 4 * r, 4 * r + 4, 2)), f.ctx);
    EXPECT_EQ(y.dtype(), DType::bf16);
    EXPECT_EQ(dx.dtype(), DType::bf16);
    EXPECT_EQ(bn.gamma().grad.dtype(), DType::f32);
    synced[i] = {.y = y.to_vector(),
                 .dx = dx.to_vector(),
                 .dgamma = bn.gamma().grad.to_vector(),
                 .dbeta = bn.beta().grad.to_vector(),
                 .running_mean = bn.running_mean().to_vector(),
                 .running_var = bn.running_var().to_vector()};
  });
  expect_close(concatenated({synced[0].y, synced[1].y}), full.y, 1e-2, "y");
  expect_close(concatenated({synced[0].dx, synced[1].dx}), full.dx, 1e-2, "dx", 2);
  // The statistics and the parameter gradients are computed from the same values in f32 and
  // double on both sides: f32's tolerance.
  for (const Step& s : synced) {
    expect_close(s.running_mean, full.running_mean, kTolerance, "running_mean");
    expect_close(s.running_var, full.running_var, kTolerance, "running_var");
  }
  std::vector<float> dgamma(full.dgamma.size());
  for (std::size_t k = 0; k < dgamma.size(); ++k) dgamma[k] = synced[0].dgamma[k] + synced[1].dgamma[k];
  expect_close(dgamma, full.dgamma, kTolerance, "dgamma summed over the replicas", 2);
}

// A ReplicaSum of one replica: the sums are this replica's own.
class OneReplica final : public ReplicaSum {
 public:
  void sum(std::span<double> /*values*/) override {}
};

TEST(SyncBatchNorm2d, GradientsOfOneSyncedReplicaAccumulateAndMatchThePlainLayer) {
  // With one replica the synced layer is a plain BatchNorm2d; two backward passes sum their
  // parameter gradients, and dx is written, not accumulated.
  const std::int64_t channels = 3;
  const Shape shape{4, channels, 3, 3};
  const Tensor x = two_population_batch(shape, 2, 61);
  const Tensor dy = random_tensor(shape, 62);
  const Step plain = full_batch_step(channels, x, dy);
  testing::CpuFixture f;
  OneReplica one;
  f.ctx.batch_norm_sync = &one;
  BatchNorm2d bn(options_for(channels));
  set_parameters(bn, channels);
  const Step first = train_step(bn, x, dy, f.ctx);
  expect_close(first.y, plain.y, kTolerance, "y");
  expect_close(first.dx, plain.dx, kTolerance, "dx");
  expect_close(first.dgamma, plain.dgamma, kTolerance, "dgamma");
  expect_close(first.dbeta, plain.dbeta, kTolerance, "dbeta");
  const Step second = train_step(bn, x, dy, f.ctx);
  EXPECT_EQ(second.dx, first.dx);
  expect_close(second.dgamma, first.dgamma, kTolerance, "dgamma after two backward passes", 2);
  expect_close(second.dbeta, first.dbeta, kTolerance, "dbeta after two backward passes", 2);
}

TEST(SyncBatchNorm2d, EvalIgnoresTheSyncAndUsesTheRunningStatistics) {
  const std::int64_t channels = 3;
  const Tensor x = two_population_batch({4, channels, 2, 2}, 2, 71);
  testing::CpuFixture f;
  InProcessReplicas sum(1);
  Context eval{.backend = *f.backend, .mode = Mode::eval, .batch_norm_sync = &sum.member(0)};
  BatchNorm2d synced(options_for(channels));
  BatchNorm2d plain(options_for(channels));
  set_parameters(synced, channels);
  set_parameters(plain, channels);
  Context plain_eval{.backend = *f.backend, .mode = Mode::eval};
  EXPECT_EQ(synced.forward(x, eval).to_vector(), plain.forward(x, plain_eval).to_vector());
  EXPECT_TRUE(sum.calls(0).empty());
}

TEST(SyncBatchNorm2d, RejectsABackwardWithoutSyncAfterASyncedForwardAndTooFewValues) {
  using gpu::test::expect_throw_mentioning;
  testing::CpuFixture f;
  OneReplica one;
  BatchNorm2d bn(options_for(3));
  Context synced{.backend = *f.backend, .mode = Mode::train, .batch_norm_sync = &one};
  const Tensor x = random_tensor({2, 3, 2, 2}, 81);
  (void)bn.forward(x, synced);
  expect_throw_mentioning<std::logic_error>(
      [&] {
        (void)bn.backward(random_tensor({2, 3, 2, 2}, 82), f.ctx);
      },
      "backward after a synced forward without Context::batch_norm_sync");
  // One value per channel over all replicas (here the only one): no variance to normalise by.
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)bn.forward(random_tensor({1, 3, 1, 1}, 83), synced);
      },
      "the replicas' N * H * W sum to 1");
}

}  // namespace
}  // namespace stoke::nn
