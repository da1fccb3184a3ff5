// BinaryCrossEntropyWithLogits on the CPU backend: loss and gradient against PyTorch with and
// without pos_weight (soft targets included), a finite-difference check of the gradient, the
// exact-match count of rows, grad_scale, stability for huge logits, eval mode, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <stoke/nn/loss.hpp>
#include <string>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"

namespace stoke::nn {
namespace {

using gpu::test::expect_throw_mentioning;
using testing::CpuFixture;
using testing::expect_values;
using testing::random_tensor;

// Reference numbers: torch 1.13, float64, torch.nn.BCEWithLogitsLoss(pos_weight=w)(logits, targets)
// on these values (w = None, then hand_pos_weight), loss.backward() for the gradient.
const std::vector<float> hand_logits{1.5f, -2, 0.25f, 3, -0.5f, 0, 4, -1.25f, 2, -3.5f, -0.75f, 0.5f};
const std::vector<float> hand_targets{1, 0, 0, 1, 0, 1, 1, 0, 0.75f, 0, 0.25f, 1};
const std::vector<float> hand_pos_weight{2, 0.5f, 1, 3};

Tensor hand(const std::vector<float>& values) { return Tensor::from_values({3, 4}, values); }

TEST(BinaryCrossEntropyWithLogits, LossAndGradientMatchPyTorch) {
  CpuFixture f;
  const LossResult r = BinaryCrossEntropyWithLogits().forward(hand(hand_logits), hand(hand_targets), f.ctx);
  const LossStats s = r.read();
  EXPECT_NEAR(s.loss, 0.3621081378410121, 1e-6);
  EXPECT_EQ(s.count, 3);
  expect_values(r.dlogits,
                {-0.015202126983863029, 0.009933576835176462, 0.046848041740483175, -0.003952156098130553,
                 0.03146172239984545, -0.041666666666666664, -0.0014988508301742958, 0.01855834490210907,
                 0.01089975649815686, 0.00244268589594636, 0.005901775068717252, -0.03146172239984545},
                1e-7, "dlogits");
}

TEST(BinaryCrossEntropyWithLogits, PosWeightMatchesPyTorch) {
  CpuFixture f;
  const BinaryCrossEntropyWithLogits loss({.pos_weight = Tensor::from_values({4}, hand_pos_weight)});
  const LossResult r = loss.forward(hand(hand_logits), hand(hand_targets), f.ctx);
  EXPECT_NEAR(r.read().loss, 0.4450551684654043, 1e-6);
  expect_values(r.dlogits,
                {-0.030404253967726058, 0.009933576835176462, 0.046848041740483175, -0.01185646829439165,
                 0.03146172239984545, -0.020833333333333332, -0.0014988508301742958, 0.01855834490210907,
                 0.0034495738717745064, 0.00244268589594636, 0.005901775068717252, -0.09438516719953634},
                1e-7, "dlogits");
}

TEST(BinaryCrossEntropyWithLogits, CorrectCountsRowsWhosePredictionsAllMatch) {
  // Row 0 predicts class 2 (0.25 > 0) against a target of 0; row 1 predicts nothing for class 1
  // (a logit of 0 is not > 0) against a 1; row 2 matches everywhere, soft targets thresholded at
  // 0.5 (0.75 -> yes, 0.25 -> no).
  CpuFixture f;
  const LossResult r = BinaryCrossEntropyWithLogits().forward(hand(hand_logits), hand(hand_targets), f.ctx);
  EXPECT_EQ(r.read().correct, 1);
}

TEST(BinaryCrossEntropyWithLogits, GradientMatchesCentralDifferences) {
  CpuFixture f;
  const Tensor targets = random_tensor({5, 7}, 62, 0, 1);  // soft targets
  for (const bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "pos_weight" : "no pos_weight");
    const BinaryCrossEntropyWithLogits loss({.pos_weight = weighted ? random_tensor({7}, 63, 0.5, 3) : Tensor()});
    testing::expect_loss_gradient_matches(loss, random_tensor({5, 7}, 61, -4, 4), targets, f.ctx, 2e-5);
  }
}

TEST(BinaryCrossEntropyWithLogits, GradScaleScalesOnlyTheGradient) {
  CpuFixture f;
  const BinaryCrossEntropyWithLogits loss;
  const LossResult one = loss.forward(hand(hand_logits), hand(hand_targets), f.ctx);
  const LossResult scaled = loss.forward(hand(hand_logits), hand(hand_targets), f.ctx, 0.25f);
  EXPECT_EQ(scaled.read().loss, one.read().loss);
  const std::vector<float> a = one.dlogits.to_vector(), b = scaled.dlogits.to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(b[i], 0.25f * a[i]) << i;
}

TEST(BinaryCrossEntropyWithLogits, StaysFiniteForHugeLogits) {
  // A wrong prediction at |x| = 1000 costs 1000 (exp(1000) would overflow a naive formula); a
  // right one costs nothing. The gradient is sigmoid(x) - t over the 4 elements.
  CpuFixture f;
  const LossResult r = BinaryCrossEntropyWithLogits().forward(Tensor::from_values({1, 4}, {1000, -1000, 1000, -1000}),
                                                              Tensor::from_values({1, 4}, {0, 1, 1, 0}), f.ctx);
  EXPECT_DOUBLE_EQ(r.read().loss, 500.0);
  expect_values(r.dlogits, {0.25, -0.25, 0, 0}, 0, "dlogits");
}

TEST(BinaryCrossEntropyWithLogits, EvalComputesStatsWithoutAGradient) {
  CpuFixture f;
  Context eval{.backend = *f.backend, .mode = Mode::eval};
  const LossResult r = BinaryCrossEntropyWithLogits().forward(hand(hand_logits), hand(hand_targets), eval);
  EXPECT_FALSE(r.dlogits.defined());
  EXPECT_NEAR(r.read().loss, 0.3621081378410121, 1e-6);
  EXPECT_EQ(r.read().correct, 1);
}

TEST(BinaryCrossEntropyWithLogits, RejectsBadInputsNamingWhatIsWrong) {
  CpuFixture f;
  const BinaryCrossEntropyWithLogits loss;
  const Tensor logits = hand(hand_logits);
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)loss.forward(logits, Tensor::from_values({3, 2}, {0, 1, 0, 1, 0, 1}), f.ctx);
      },
      "BinaryCrossEntropyWithLogits: the targets are f32[3, 2] nchw cpu, expected f32[3, 4]");
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)loss.forward(logits, Tensor({3, 4}, DType::i32), f.ctx);
      },
      "the targets are i32[3, 4]");
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)loss.forward(logits.reshape({3, 2, 2}), hand(hand_targets), f.ctx);
      },
      "BinaryCrossEntropyWithLogits: the logits are f32[3, 2, 2] nchw cpu, expected [N, K]");
  expect_throw_mentioning<std::invalid_argument>(
      [&] { (void)loss.forward(logits, hand(hand_targets), f.ctx, std::nanf("")); }, "grad_scale must be finite");
  const BinaryCrossEntropyWithLogits short_weights({.pos_weight = Tensor::from_values({3}, {1, 2, 3})});
  expect_throw_mentioning<std::invalid_argument>(
      [&] { (void)short_weights.forward(logits, hand(hand_targets), f.ctx); },
      "pos_weight is f32[3] nchw cpu, expected f32[4]");
  expect_throw_mentioning<std::invalid_argument>(
      [] {
        BinaryCrossEntropyWithLogits bad({.pos_weight = Tensor({2, 2})});
      },
      "expected f32[K]");
}

}  // namespace
}  // namespace stoke::nn
