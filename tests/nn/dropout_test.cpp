// Dropout and Flatten: numeric gradient checks, the mask's statistics and reproducibility,
// hand-checked cases and errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <stoke/nn/dropout.hpp>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"

namespace stoke::nn {
namespace {

using testing::CpuFixture;
using testing::expect_gradients_match;
using testing::random_tensor;

TEST(Dropout, GradientsMatchCentralDifferences) {
  CpuFixture f;  // Mode::train, a fixed seed and step: every forward of the check draws the same mask
  Dropout dropout(0.3f, 11);
  expect_gradients_match(dropout, random_tensor({2, 3, 4, 4}, 1), f.ctx);
  Dropout heavy(0.8f);
  expect_gradients_match(heavy, random_tensor({5, 17}, 2), f.ctx);
}

TEST(Dropout, EvalModeAndZeroPAreTheIdentity) {
  CpuFixture f;
  const Tensor x = random_tensor({4, 8}, 3);
  Dropout dropout(0.5f);
  f.ctx.mode = Mode::eval;
  EXPECT_EQ(dropout.forward(x, f.ctx).data(), x.data());
  f.ctx.mode = Mode::train;
  Dropout none(0.0f);
  EXPECT_EQ(none.forward(x, f.ctx).data(), x.data());
  const Tensor dy = random_tensor({4, 8}, 4);
  EXPECT_EQ(none.backward(dy, f.ctx).data(), dy.data());
}

TEST(Dropout, KeepsAboutOneMinusPAndScalesWhatItKeeps) {
  CpuFixture f;
  const float p = 0.3f;
  Dropout dropout(p);
  const Tensor x = random_tensor({100, 1000}, 5, 0.5, 1.5);  // never zero, so a zero means dropped
  const std::vector<float> y = dropout.forward(x, f.ctx).to_vector();
  const auto in = x.f32();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0) continue;
    ++kept;
    ASSERT_FLOAT_EQ(y[i], in[i] / (1 - p)) << "element " << i;
  }
  const double fraction = static_cast<double>(kept) / static_cast<double>(y.size());
  EXPECT_NEAR(fraction, 1 - p, 0.01);  // 100k Bernoulli draws: the standard deviation is 0.0015

  // Backward passes the gradient where forward kept the element, scaled the same way.
  const Tensor dy = Tensor::zeros({100, 1000});
  for (float& v : dy.f32()) v = 1;
  const std::vector<float> dx = dropout.backward(dy, f.ctx).to_vector();
  for (std::size_t i = 0; i < dx.size(); ++i) {
    ASSERT_FLOAT_EQ(dx[i], y[i] == 0 ? 0.0f : 1 / (1 - p)) << "element " << i;
  }
}

TEST(Dropout, TheMaskIsAFunctionOfSeedStepAndLayer) {
  CpuFixture f;
  const Tensor x = random_tensor({64, 64}, 6, 0.5, 1.5);
  const auto dropped = [&](Dropout& layer) {
    std::vector<bool> zeros;
    for (const float v : layer.forward(x, f.ctx).to_vector()) zeros.push_back(v == 0);
    return zeros;
  };
  Dropout a(0.5f, 1);
  Dropout same(0.5f, 1);
  Dropout other_layer(0.5f, 2);
  const std::vector<bool> first = dropped(a);
  EXPECT_EQ(dropped(a), first) << "the same seed and step";
  EXPECT_EQ(dropped(same), first) << "another layer with the same seed";
  EXPECT_NE(dropped(other_layer), first) << "another layer seed";
  f.ctx.step = 1;
  EXPECT_NE(dropped(a), first) << "the next step";
  f.ctx.step = 0;
  f.ctx.seed = 8;
  EXPECT_NE(dropped(a), first) << "another run seed";
}

TEST(Dropout, ForwardAndBackwardOfATinyTensor) {
  // Whatever the mask, each element is either dropped (0) or doubled (p = 0.5), and backward
  // follows forward's choice.
  CpuFixture f;
  Dropout dropout(0.5f, 3);
  EXPECT_EQ(dropout.describe(), "Dropout(p=0.5)");
  const Tensor x = Tensor::from_values({1, 6}, {1, 2, 3, 4, 5, 6});
  const std::vector<float> y = dropout.forward(x, f.ctx).to_vector();
  const std::vector<float> dx =
      dropout.backward(Tensor::from_values({1, 6}, {10, 10, 10, 10, 10, 10}), f.ctx).to_vector();
  for (std::size_t i = 0; i < y.size(); ++i) {
    const float value = static_cast<float>(i + 1);
    EXPECT_TRUE(y[i] == 0 || y[i] == 2 * value) << "element " << i << " is " << y[i];
    EXPECT_EQ(dx[i], y[i] == 0 ? 0.0f : 20.0f) << "element " << i;
  }
}

TEST(Dropout, DescribesItselfAsPyTorchDoes) {
  EXPECT_EQ(Dropout(0.1f).describe(), "Dropout(p=0.1)");
  EXPECT_EQ(Dropout(0.0f).describe(), "Dropout(p=0.0)");
  EXPECT_EQ(Dropout(0.25f).describe(), "Dropout(p=0.25)");
}

TEST(Dropout, RejectsAProbabilityOutsideZeroToOne) {
  gpu::test::expect_throw_mentioning<std::invalid_argument>([] { Dropout(1.0f); }, "must be in [0, 1)");
  gpu::test::expect_throw_mentioning<std::invalid_argument>([] { Dropout(-0.1f); }, "must be in [0, 1)");
}

TEST(Flatten, GradientsMatchCentralDifferences) {
  CpuFixture f;
  Flatten flatten;
  expect_gradients_match(flatten, random_tensor({2, 3, 2, 2}, 7), f.ctx);
}

TEST(Flatten, SharesTheElementsBothWays) {
  CpuFixture f;
  Flatten flatten;
  EXPECT_EQ(flatten.describe(), "Flatten()");
  const Tensor x = Tensor::from_values({2, 3, 1, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  const Tensor y = flatten.forward(x, f.ctx);
  EXPECT_EQ(y.shape(), (Shape{2, 6}));
  EXPECT_EQ(y.data(), x.data());
  EXPECT_EQ(y.to_vector(), x.to_vector());
  const Tensor dy = random_tensor({2, 6}, 8);
  const Tensor dx = flatten.backward(dy, f.ctx);
  EXPECT_EQ(dx.shape(), (Shape{2, 3, 1, 2}));
  EXPECT_EQ(dx.data(), dy.data());
}

TEST(Flatten, RejectsWhatItCannotFlatten) {
  CpuFixture f;
  Flatten flatten;
  gpu::test::expect_throw_mentioning<std::invalid_argument>([&] { (void)flatten.forward(Tensor({5}), f.ctx); },
                                                            "no dimensions after N");
  const Tensor channels_last({2, 3, 2, 2}, DType::f32, Device::cpu(), TensorLayout::nhwc);
  gpu::test::expect_throw_mentioning<std::invalid_argument>([&] { (void)flatten.forward(channels_last, f.ctx); },
                                                            "Flatten takes those in NCHW only");
  (void)flatten.forward(Tensor({2, 3, 2, 2}), f.ctx);
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)flatten.backward(Tensor({2, 3, 4}), f.ctx);
      },
      "is not shaped like the output [2, 12]");
}

}  // namespace
}  // namespace stoke::nn
