// ReLU: numeric gradient checks, a hand-computed case and its errors.
#include <gtest/gtest.h>

#include <stdexcept>
#include <stoke/base/random.hpp>
#include <stoke/nn/activation.hpp>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"

namespace stoke::nn {
namespace {

using testing::CpuFixture;
using testing::expect_gradients_match;

// Values in [0.1, 1) with random signs: far enough from ReLU's kink at 0 that the central
// difference's step (0.01) never crosses it.
Tensor away_from_zero(const Shape& shape, std::uint64_t seed) {
  Tensor t = testing::random_tensor(shape, seed, 0.1, 1.0);
  base::ItemRng rng(seed, 1, 0);
  for (float& v : t.f32()) {
    if (rng.bernoulli(0.5)) v = -v;
  }
  return t;
}

TEST(ReLU, GradientsMatchCentralDifferences) {
  CpuFixture f;
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{7, 11}, Shape{1, 1, 1, 1}}) {
    ReLU relu;
    expect_gradients_match(relu, away_from_zero(shape, 3), f.ctx);
  }
}

TEST(ReLU, ForwardAndBackwardByHand) {
  CpuFixture f;
  ReLU relu;
  const Tensor x = Tensor::from_values({1, 4}, {-1.0f, 0.5f, 0.0f, 2.0f});
  const Tensor y = relu.forward(x, f.ctx);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 0.5f, 0, 2}));
  EXPECT_EQ(x.to_vector(), (std::vector<float>{-1.0f, 0.5f, 0.0f, 2.0f})) << "the input is left as it is";
  const Tensor dy = Tensor::from_values({1, 4}, {1, 2, 3, 4});
  const Tensor dx = relu.backward(dy, f.ctx);
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0, 2, 0, 4}));
  EXPECT_EQ(dy.to_vector(), (std::vector<float>{1, 2, 3, 4})) << "the output gradient is left as it is";
  EXPECT_EQ(relu.describe(), "ReLU()");
}

TEST(ReLU, EvalModeKeepsNothingForBackward) {
  CpuFixture f;
  f.ctx.mode = Mode::eval;
  ReLU relu;
  const Tensor y = relu.forward(Tensor::from_values({2}, {-1, 1}), f.ctx);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{0, 1}));
  EXPECT_THROW((void)relu.backward(Tensor::from_values({2}, {1, 1}), f.ctx), std::logic_error);
}

TEST(ReLU, RejectsAGradientOfAnotherShape) {
  CpuFixture f;
  ReLU relu;
  (void)relu.forward(Tensor::from_values({2, 2}, {1, 2, 3, 4}), f.ctx);
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)relu.backward(Tensor::from_values({4}, {1, 2, 3, 4}), f.ctx);
      },
      "ReLU(): the gradient");
}

TEST(ReLU, CpuBackendTakesOnlyF32) {
  CpuFixture f;
  ReLU relu;
  const Tensor half({2, 2}, DType::bf16);
  gpu::test::expect_throw_mentioning<std::invalid_argument>([&] { (void)relu.forward(half, f.ctx); },
                                                            "the CPU kernels take f32");
}

}  // namespace
}  // namespace stoke::nn
