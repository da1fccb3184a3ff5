// BatchNorm2d on the CPU backend: numeric gradient checks in training mode, a case checked against
// PyTorch (output, running statistics with the unbiased variance, gradients), eval mode on the
// running statistics, many channels split across tasks, gradient accumulation, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <stoke/nn/batch_norm.hpp>
#include <string>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"

namespace stoke::nn {
namespace {

using testing::CpuFixture;
using testing::expect_gradients_match;
using testing::expect_values;
using testing::random_tensor;

void set_values(const Tensor& t, const std::vector<float>& values) {
  ASSERT_EQ(t.numel(), static_cast<std::int64_t>(values.size()));
  std::copy(values.begin(), values.end(), t.f32().begin());
}

TEST(BatchNorm2d, GradientsMatchCentralDifferencesInTraining) {
  // Normalising by the batch's own statistics makes y curved in x (the central difference's error
  // grows like invstd^3 when a channel has few values, 4 at the least here), yet the default step
  // and tolerances hold for these shapes: no looser check is needed.
  for (const Shape& shape : {Shape{2, 3, 3, 3}, Shape{4, 2, 1, 1}, Shape{1, 2, 2, 3}, Shape{3, 1, 2, 1}}) {
    SCOPED_TRACE(to_string(shape));
    CpuFixture f;
    BatchNorm2d bn({.channels = shape[1]});
    // Gamma and beta away from 1 and 0, so their gradients are checked in general position.
    const Tensor gamma = random_tensor({shape[1]}, 31, 0.5, 1.5);
    const Tensor beta = random_tensor({shape[1]}, 32);
    std::copy(gamma.f32().begin(), gamma.f32().end(), bn.gamma().value.f32().begin());
    std::copy(beta.f32().begin(), beta.f32().end(), bn.beta().value.f32().begin());
    expect_gradients_match(bn, random_tensor(shape, 13), f.ctx);
  }
}

// Reference numbers: torch 1.13, float64, torch.nn.BatchNorm2d(2) with weight (1.5, -0.5) and
// bias (0.1, 0.2), in training mode, on x below; y.backward(dy) for the gradients.
const std::vector<float> hand_x{1, 2, 3, -1, 0.5f, -2, 4, 0};
const std::vector<float> hand_dy{1, -1, 0.5f, 2, 0, 1, -2, 0.25f};

TEST(BatchNorm2d, TrainingStepMatchesPyTorch) {
  CpuFixture f;
  BatchNorm2d bn({.channels = 2});
  set_values(bn.gamma().value, {1.5f, -0.5f});
  set_values(bn.beta().value, {0.1f, 0.2f});
  const Tensor x = Tensor::from_values({2, 2, 1, 2}, hand_x);
  const Tensor y = bn.forward(x, f.ctx);
  expect_values(y,
                {0.7361402342562802, 1.7539646066821426, -0.16380300657097838, 0.8063383522322499, 0.22722804804334895,
                 -2.317332883021307, -0.40633834627178544, 0.5638030125314428},
                1e-5, "y");
  // The running statistics move a tenth of the way from (0, 1) to the batch's mean and its
  // UNBIASED variance: channel 0 holds {1, 2, 0.5, -2}, mean 0.375, unbiased variance 2.8958...
  expect_values(bn.running_mean(), {0.0375, 0.15}, 1e-6, "running_mean");
  expect_values(bn.running_var(), {1.1895833333333334, 1.4666666666666668}, 1e-6, "running_var");

  const Tensor dx = bn.backward(Tensor::from_values({2, 2, 1, 2}, hand_dy), f.ctx);
  expect_values(dx,
                {1.0105007570502393, -0.6297360234321375, -0.281768512943657, -0.09630160439578815,
                 -0.20502959756029712, -0.17573513605780483, 0.1872523567835908, 0.19081776055585437},
                1e-5, "dx");
  expect_values(bn.gamma().grad, {-2.2901048379581908, -4.668805289240536}, 1e-5, "dgamma");
  expect_values(bn.beta().grad, {1.0, 0.75}, 1e-6, "dbeta");
}

TEST(BatchNorm2d, EvalNormalisesWithTheRunningStatisticsAndLeavesThemAlone) {
  CpuFixture f;
  Context eval{.backend = *f.backend, .mode = Mode::eval};
  BatchNorm2d bn({.channels = 2, .eps = 1e-3});
  set_values(bn.gamma().value, {2, 1});
  set_values(bn.beta().value, {0, 1});
  set_values(bn.running_mean(), {1, -1});
  set_values(bn.running_var(), {4, 0.25f});
  const Tensor x = Tensor::from_values({1, 2, 1, 2}, {3, -1, 0, 1});
  const Tensor y = bn.forward(x, eval);
  // y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta, per channel.
  const double s0 = 2 / std::sqrt(4 + 1e-3), s1 = 1 / std::sqrt(0.25 + 1e-3);
  expect_values(y, {2 * s0, -2 * s0, 1 + 1 * s1, 1 + 2 * s1}, 1e-6, "y");
  expect_values(bn.running_mean(), {1, -1}, 0, "running_mean");
  expect_values(bn.running_var(), {4, 0.25}, 0, "running_var");
  // A single value per channel is fine for eval (no batch statistics), and nothing is kept.
  EXPECT_NO_THROW((void)bn.forward(Tensor::from_values({1, 2, 1, 1}, {0, 0}), eval));
  EXPECT_THROW((void)bn.backward(Tensor({1, 2, 1, 1}), eval), std::logic_error);
}

TEST(BatchNorm2d, ManyChannelsSplitAcrossTasksMatchADoubleLoop) {
  // 2 x 6 x 64 x 64: 8192 values per channel, so the channels go to several tasks.
  CpuFixture f;
  const Shape shape{2, 6, 64, 64};
  BatchNorm2d bn({.channels = 6, .momentum = 0.5});
  const Tensor x = random_tensor(shape, 41, -3, 5);
  const Tensor y = bn.forward(x, f.ctx);
  const auto xv = x.f32(), yv = y.f32();
  const std::int64_t hw = 64 * 64, m = 2 * hw;
  for (std::int64_t c = 0; c < 6; ++c) {
    double sum = 0, squares = 0;
    for (std::int64_t i = 0; i < 2; ++i) {
      for (std::int64_t k = 0; k < hw; ++k)
        sum += static_cast<double>(xv[static_cast<std::size_t>((i * 6 + c) * hw + k)]);
    }
    const double mean = sum / static_cast<double>(m);
    for (std::int64_t i = 0; i < 2; ++i) {
      for (std::int64_t k = 0; k < hw; ++k) {
        const double d = static_cast<double>(xv[static_cast<std::size_t>((i * 6 + c) * hw + k)]) - mean;
        squares += d * d;
      }
    }
    const double invstd = 1 / std::sqrt(squares / static_cast<double>(m) + 1e-5);
    for (std::int64_t i = 0; i < 2; ++i) {
      for (std::int64_t k = 0; k < hw; k += 97) {
        const auto at = static_cast<std::size_t>((i * 6 + c) * hw + k);
        ASSERT_NEAR(yv[at], (static_cast<double>(xv[at]) - mean) * invstd, 1e-5)
            << "channel " << c << " item " << i << " at " << k;
      }
    }
    EXPECT_NEAR(bn.running_mean().f32()[static_cast<std::size_t>(c)], 0.5 * mean, 1e-5) << c;
    EXPECT_NEAR(bn.running_var().f32()[static_cast<std::size_t>(c)], 0.5 + 0.5 * squares / static_cast<double>(m - 1),
                1e-4)
        << c;
  }
}

TEST(BatchNorm2d, ParameterGradientsAccumulateOverBackwardPasses) {
  CpuFixture f;
  BatchNorm2d bn({.channels = 3});
  const Tensor x = random_tensor({2, 3, 2, 2}, 51);
  const Tensor dy = random_tensor({2, 3, 2, 2}, 52);
  (void)bn.forward(x, f.ctx);
  const std::vector<float> dx = bn.backward(dy, f.ctx).to_vector();
  const std::vector<float> dgamma = bn.gamma().grad.to_vector();
  const std::vector<float> dbeta = bn.beta().grad.to_vector();
  (void)bn.forward(x, f.ctx);
  const std::vector<float> dx2 = bn.backward(dy, f.ctx).to_vector();
  for (std::size_t i = 0; i < dgamma.size(); ++i) {
    EXPECT_FLOAT_EQ(bn.gamma().grad.f32()[i], 2 * dgamma[i]) << "dgamma " << i;
    EXPECT_FLOAT_EQ(bn.beta().grad.f32()[i], 2 * dbeta[i]) << "dbeta " << i;
  }
  EXPECT_EQ(dx2, dx);  // the input gradient is written, not accumulated
}

TEST(BatchNorm2d, StartsAsPyTorchAndNamesItsStateAsPyTorch) {
  BatchNorm2d bn({.channels = 64});
  EXPECT_EQ(bn.describe(), "BatchNorm2d(64, eps=1e-05, momentum=0.1)");
  EXPECT_EQ(BatchNorm2d({.channels = 8, .eps = 1e-3, .momentum = 1}).describe(),
            "BatchNorm2d(8, eps=0.001, momentum=1.0)");
  for (const float v : bn.gamma().value.f32()) EXPECT_EQ(v, 1);
  for (const float v : bn.beta().value.f32()) EXPECT_EQ(v, 0);
  for (const float v : bn.running_mean().f32()) EXPECT_EQ(v, 0);
  for (const float v : bn.running_var().f32()) EXPECT_EQ(v, 1);
  BatchNorm2d zero({.channels = 4, .zero_gamma = true});
  for (const float v : zero.gamma().value.f32()) EXPECT_EQ(v, 0);

  std::vector<std::string> names;
  bn.for_each_parameter(
      [&](const std::string& name, Parameter& p) {
        names.push_back(name);
        EXPECT_FALSE(p.decay) << name;
      },
      "bn1");
  bn.for_each_buffer([&](const std::string& name, Tensor&) { names.push_back(name); }, "bn1");
  EXPECT_EQ(names, (std::vector<std::string>{"bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"}));
}

TEST(BatchNorm2d, RejectsBadShapesAndOptionsNamingTheLayer) {
  using gpu::test::expect_throw_mentioning;
  CpuFixture f;
  BatchNorm2d bn({.channels = 3});
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)bn.forward(Tensor({2, 3, 4}), f.ctx);
      },
      "BatchNorm2d(3, eps=1e-05, momentum=0.1): the input is f32[2, 3, 4]");
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)bn.forward(Tensor({2, 4, 1, 1}), f.ctx);
      },
      "expected [N, 3, H, W]");
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)bn.forward(Tensor({1, 3, 1, 1}), f.ctx);
      },
      "more than one value per channel");
  (void)bn.forward(random_tensor({2, 3, 1, 2}, 1), f.ctx);
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)bn.backward(Tensor({2, 3, 2, 1}), f.ctx);
      },
      "expected [2, 3, 1, 2]");
  expect_throw_mentioning<std::invalid_argument>([] { BatchNorm2d bad({.channels = 0}); }, "channels is 0");
  expect_throw_mentioning<std::invalid_argument>([] { BatchNorm2d bad({.channels = 2, .eps = 0}); }, "eps");
  expect_throw_mentioning<std::invalid_argument>([] { BatchNorm2d bad({.channels = 2, .momentum = 1.5}); },
                                                 "momentum is 1.5");
}

}  // namespace
}  // namespace stoke::nn
