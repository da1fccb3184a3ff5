// SoftmaxCrossEntropy on the CPU backend: loss and gradient against PyTorch with and without label
// smoothing, a finite-difference check of the gradient, the correct count, grad_scale, numerical
// stability, eval mode, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <stoke/nn/loss.hpp>
#include <string>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"

namespace stoke::nn {
namespace {

using testing::CpuFixture;
using testing::expect_values;
using testing::random_tensor;

Tensor labels_of(const std::vector<std::int32_t>& values) {
  Tensor t({static_cast<std::int64_t>(values.size())}, DType::i32);
  std::copy(values.begin(), values.end(), t.data_as<std::int32_t>());
  return t;
}

// Reference numbers: torch 1.13, float64, torch.nn.CrossEntropyLoss(label_smoothing=s) on these
// logits and labels, loss.backward() for the gradient.
const std::vector<float> hand_logits{1, 2, 3, 0.5f, 2, -1, 0, 0, 0.1f, 0.2f, 0.3f, 5};
const std::vector<std::int32_t> hand_labels{2, 0, 1};

TEST(SoftmaxCrossEntropy, LossAndGradientMatchPyTorch) {
  CpuFixture f;
  const Tensor logits = Tensor::from_values({3, 4}, hand_logits);
  const LossResult r = SoftmaxCrossEntropy().forward(logits, labels_of(hand_labels), f.ctx);
  const LossStats s = r.read();
  EXPECT_NEAR(s.loss, 1.8544072080904768, 1e-6);
  EXPECT_EQ(s.correct, 2);  // rows 0 and 1; row 2's largest logit is class 3, not 1
  EXPECT_EQ(s.count, 3);
  expect_values(r.dlogits,
                {0.028456297836596298, 0.07735223731443816, -0.1230681522508444, 0.017259617099809936,
                 -0.0808955992189417, 0.012568134726981874, 0.03416373224597991, 0.03416373224597991,
                 0.0024221927495673918, -0.3306563963485377, 0.0029584729051171784, 0.3252757306938532},
                1e-7, "dlogits");
}

TEST(SoftmaxCrossEntropy, LabelSmoothingMatchesPyTorch) {
  CpuFixture f;
  const Tensor logits = Tensor::from_values({3, 4}, hand_logits);
  const LossResult r = SoftmaxCrossEntropy({.label_smoothing = 0.1f}).forward(logits, labels_of(hand_labels), f.ctx);
  // 0.1f is not 0.1: 1e-6 absorbs the difference (it moves the loss by ~1e-9).
  EXPECT_NEAR(r.read().loss, 1.9185738747571435, 1e-6);
  EXPECT_EQ(r.read().correct, 2);
  expect_values(r.dlogits,
                {0.020122964503262966, 0.06901890398110483, -0.09806815225084439, 0.008926283766476605,
                 -0.05589559921894165, 0.004234801393648545, 0.02583039891264659, 0.02583039891264659,
                 -0.005911140583765941, -0.30565639634853775, -0.005374860428216154, 0.31694239736051993},
                1e-7, "dlogits");
}

TEST(SoftmaxCrossEntropy, GradientMatchesCentralDifferences) {
  CpuFixture f;
  for (const float smoothing : {0.0f, 0.2f}) {
    SCOPED_TRACE("label_smoothing " + std::to_string(smoothing));
    testing::expect_loss_gradient_matches(SoftmaxCrossEntropy({.label_smoothing = smoothing}),
                                          random_tensor({5, 7}, 61, -3, 3), labels_of({0, 6, 3, 3, 1}), f.ctx, 2e-4);
  }
}

TEST(SoftmaxCrossEntropy, GradScaleScalesOnlyTheGradient) {
  CpuFixture f;
  const Tensor logits = Tensor::from_values({3, 4}, hand_logits);
  const Tensor labels = labels_of(hand_labels);
  const SoftmaxCrossEntropy loss;
  const LossResult one = loss.forward(logits, labels, f.ctx);
  const LossResult scaled = loss.forward(logits, labels, f.ctx, 0.25f);
  EXPECT_EQ(scaled.read().loss, one.read().loss);
  const std::vector<float> a = one.dlogits.to_vector(), b = scaled.dlogits.to_vector();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(b[i], 0.25f * a[i]) << i;
}

TEST(SoftmaxCrossEntropy, StaysFiniteForHugeLogits) {
  // The row maximum is subtracted before exp: logits of 1000 give what logits of 0 give.
  CpuFixture f;
  const SoftmaxCrossEntropy loss;
  const Tensor labels = labels_of({1});
  const LossResult big = loss.forward(Tensor::from_values({1, 3}, {1000, 1010, 990}), labels, f.ctx);
  const LossResult small = loss.forward(Tensor::from_values({1, 3}, {0, 10, -10}), labels, f.ctx);
  EXPECT_TRUE(std::isfinite(big.read().loss));
  EXPECT_NEAR(big.read().loss, small.read().loss, 1e-6);
  EXPECT_EQ(big.dlogits.to_vector(), small.dlogits.to_vector());
}

TEST(SoftmaxCrossEntropy, EvalComputesStatsWithoutAGradient) {
  CpuFixture f;
  Context eval{.backend = *f.backend, .mode = Mode::eval};
  const LossResult r =
      SoftmaxCrossEntropy().forward(Tensor::from_values({3, 4}, hand_logits), labels_of(hand_labels), eval);
  EXPECT_FALSE(r.dlogits.defined());
  EXPECT_NEAR(r.read().loss, 1.8544072080904768, 1e-6);
  EXPECT_EQ(r.read().correct, 2);
}

TEST(SoftmaxCrossEntropy, RejectsBadInputsNamingWhatIsWrong) {
  using gpu::test::expect_throw_mentioning;
  CpuFixture f;
  const SoftmaxCrossEntropy loss;
  const Tensor logits = Tensor::from_values({3, 4}, hand_logits);
  expect_throw_mentioning<std::out_of_range>(
      [&] {
        (void)loss.forward(logits, labels_of({2, 4, 0}), f.ctx);
      },
      "row 1 has label 4, outside [0, K) for K = 4");
  expect_throw_mentioning<std::out_of_range>(
      [&] {
        (void)loss.forward(logits, labels_of({2, 0, -1}), f.ctx);
      },
      "row 2 has label -1");
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)loss.forward(logits, labels_of({2, 0}), f.ctx);
      },
      "the labels are i32[2] nchw cpu, expected i32[3]");
  expect_throw_mentioning<std::invalid_argument>([&] { (void)loss.forward(logits, Tensor({3}), f.ctx); },
                                                 "the labels are f32[3]");
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)loss.forward(logits.reshape({3, 2, 2}), labels_of({2, 0, 1}), f.ctx);
      },
      "the logits are f32[3, 2, 2] nchw cpu, expected [N, K]");
  expect_throw_mentioning<std::invalid_argument>([] { SoftmaxCrossEntropy bad({.label_smoothing = 1}); },
                                                 "label_smoothing is 1");
  EXPECT_THROW(SoftmaxCrossEntropy({.label_smoothing = -0.1f}), std::invalid_argument);
}

}  // namespace
}  // namespace stoke::nn
