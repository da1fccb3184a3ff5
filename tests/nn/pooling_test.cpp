// MaxPool2d and GlobalAvgPool: numeric gradient checks, hand-computed cases (ties, padding,
// overlapping windows) and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <stoke/base/random.hpp>
#include <stoke/nn/pooling.hpp>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"

namespace stoke::nn {
namespace {

using testing::CpuFixture;
using testing::expect_gradients_match;

// Distinct values 0.05 apart in a shuffled order: no window has a tie, and the central
// difference's step (0.01) never changes which cell wins.
Tensor distinct_tensor(const Shape& shape, std::uint64_t seed) {
  Tensor t(shape);
  const auto values = t.f32();
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  base::ItemRng rng(seed, 0, 0);
  for (std::size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(i - 1)))]);
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = 0.05f * (static_cast<float>(order[i]) - static_cast<float>(values.size()) / 2);
  }
  return t;
}

TEST(MaxPool2d, GradientsMatchCentralDifferences) {
  CpuFixture f;
  MaxPool2d halve({.kernel = 2, .stride = 2, .padding = 0});
  expect_gradients_match(halve, distinct_tensor({2, 3, 6, 6}, 1), f.ctx);
  MaxPool2d odd({.kernel = 2, .stride = 2, .padding = 0});
  expect_gradients_match(odd, distinct_tensor({1, 2, 5, 7}, 2), f.ctx);
  MaxPool2d overlapping({.kernel = 3, .stride = 2, .padding = 1});  // ResNet's stem pooling
  expect_gradients_match(overlapping, distinct_tensor({2, 2, 7, 7}, 3), f.ctx);
  MaxPool2d dense({.kernel = 3, .stride = 1, .padding = 1});
  expect_gradients_match(dense, distinct_tensor({1, 2, 5, 5}, 4), f.ctx);
}

TEST(MaxPool2d, ForwardAndBackwardByHand) {
  CpuFixture f;
  MaxPool2d pool({.kernel = 2, .stride = 2, .padding = 0});
  EXPECT_EQ(pool.describe(), "MaxPool2d(kernel_size=2, stride=2, padding=0)");
  const Tensor x = Tensor::from_values({1, 1, 4, 4}, {1, 2, 5, 3,  //
                                                      4, 0, 1, 7,  //
                                                      6, 2, 0, 0,  //
                                                      1, 9, 8, -1});
  const Tensor y = pool.forward(x, f.ctx);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{4, 7, 9, 8}));
  const Tensor dx = pool.backward(Tensor::from_values({1, 1, 2, 2}, {1, 2, 3, 4}), f.ctx);
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0, 0, 0, 0,  //
                                                1, 0, 0, 2,  //
                                                0, 0, 0, 0,  //
                                                0, 3, 4, 0}));
}

TEST(MaxPool2d, ATieSendsTheGradientToTheFirstMaximum) {
  CpuFixture f;
  MaxPool2d pool({.kernel = 2, .stride = 2, .padding = 0});
  (void)pool.forward(Tensor::from_values({1, 1, 2, 2}, {3, 5, 5, 5}), f.ctx);
  const Tensor dx = pool.backward(Tensor::from_values({1, 1, 1, 1}, {1}), f.ctx);
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0, 1, 0, 0}));
}

TEST(MaxPool2d, PaddingNeverWins) {
  // Every value is negative: a padded zero that took part would be each window's maximum.
  // (torch.nn.functional.max_pool2d(x, 3, 2, 1) gives the same.)
  CpuFixture f;
  MaxPool2d pool({.kernel = 3, .stride = 2, .padding = 1});
  const Tensor y = pool.forward(Tensor::from_values({1, 1, 3, 3}, {-1, -2, -3, -4, -5, -6, -7, -8, -9}), f.ctx);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-1, -2, -4, -5}));
}

TEST(MaxPool2d, OverlappingWindowsSumTheirGradients) {
  // The centre is the maximum of all four windows (torch gives dx = 10 there as well).
  CpuFixture f;
  MaxPool2d pool({.kernel = 3, .stride = 2, .padding = 1});
  const Tensor y = pool.forward(Tensor::from_values({1, 1, 3, 3}, {1, 2, 3, 4, 9, 5, 6, 7, 8}), f.ctx);
  EXPECT_EQ(y.to_vector(), (std::vector<float>{9, 9, 9, 9}));
  const Tensor dx = pool.backward(Tensor::from_values({1, 1, 2, 2}, {1, 2, 3, 4}), f.ctx);
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0, 0, 0, 0, 10, 0, 0, 0, 0}));
}

TEST(MaxPool2d, RejectsBadGeometry) {
  gpu::test::expect_throw_mentioning<std::invalid_argument>([] { MaxPool2d({.kernel = 0, .stride = 2, .padding = 0}); },
                                                            "kernel_size 0 and stride 2 must both be at least 1");
  gpu::test::expect_throw_mentioning<std::invalid_argument>([] { MaxPool2d({.kernel = 2, .stride = 0, .padding = 0}); },
                                                            "must both be at least 1");
  gpu::test::expect_throw_mentioning<std::invalid_argument>([] { MaxPool2d({.kernel = 3, .stride = 2, .padding = 2}); },
                                                            "padding 2 must be in [0, 1]");
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [] { MaxPool2d({.kernel = 3, .stride = 2, .padding = -1}); }, "padding -1 must be in [0, 1]");
}

TEST(MaxPool2d, RejectsInputsItCannotPool) {
  CpuFixture f;
  MaxPool2d pool({.kernel = 3, .stride = 2, .padding = 0});
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)pool.forward(Tensor({4, 9}), f.ctx);
      },
      "MaxPool2d(kernel_size=3, stride=2, padding=0): the input f32[4, 9] nchw cpu is not an image batch");
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)pool.forward(Tensor({1, 1, 2, 5}), f.ctx);
      },
      "smaller than one window");
}

TEST(GlobalAvgPool, GradientsMatchCentralDifferences) {
  CpuFixture f;
  for (const Shape& shape : {Shape{2, 3, 4, 5}, Shape{3, 4, 1, 1}, Shape{1, 2, 7, 3}}) {
    GlobalAvgPool pool;
    expect_gradients_match(pool, testing::random_tensor(shape, 5), f.ctx);
  }
}

TEST(GlobalAvgPool, ForwardAndBackwardByHand) {
  CpuFixture f;
  GlobalAvgPool pool;
  EXPECT_EQ(pool.describe(), "GlobalAvgPool()");
  const Tensor y = pool.forward(Tensor::from_values({1, 2, 2, 2}, {1, 2, 3, 4, 0, 0, 0, 8}), f.ctx);
  EXPECT_EQ(y.shape(), (Shape{1, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{2.5f, 2}));
  const Tensor dx = pool.backward(Tensor::from_values({1, 2}, {4, 8}), f.ctx);
  EXPECT_EQ(dx.shape(), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2}));
}

TEST(GlobalAvgPool, RejectsWhatIsNotAnImageBatch) {
  CpuFixture f;
  GlobalAvgPool pool;
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)pool.forward(Tensor({2, 3, 4}), f.ctx);
      },
      "GlobalAvgPool(): the input f32[2, 3, 4] nchw cpu is not an image");
  (void)pool.forward(Tensor::zeros({2, 3, 4, 4}), f.ctx);
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)pool.backward(Tensor({3, 2}), f.ctx);
      },
      "is not shaped like the output [2, 3]");
}

}  // namespace
}  // namespace stoke::nn
