// Linear on the CPU backend: numeric gradient checks with and without a bias, a case done by hand,
// a batch large enough that oneTBB splits the sgemm calls (against a double loop), PyTorch's
// initialisation bound, gradient accumulation, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <stoke/nn/linear.hpp>
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

void set_values(Parameter& p, const std::vector<float>& values) {
  ASSERT_EQ(p.value.numel(), static_cast<std::int64_t>(values.size()));
  std::copy(values.begin(), values.end(), p.value.f32().begin());
}

TEST(Linear, GradientsMatchCentralDifferences) {
  struct Case {
    std::int64_t batch, in, out;
    bool bias;
  };
  for (const Case c :
       {Case{2, 3, 4, true}, Case{2, 3, 4, false}, Case{3, 5, 2, true}, Case{1, 7, 3, false}, Case{4, 1, 1, true}}) {
    SCOPED_TRACE(std::to_string(c.batch) + "x" + std::to_string(c.in) + " -> " + std::to_string(c.out) +
                 (c.bias ? " with bias" : " without bias"));
    CpuFixture f;
    Linear fc({.in_features = c.in, .out_features = c.out, .bias = c.bias, .seed = 3});
    expect_gradients_match(fc, random_tensor({c.batch, c.in}, 11), f.ctx);
  }
}

TEST(Linear, ForwardAndBackwardOfAHandCase) {
  CpuFixture f;
  Linear fc({.in_features = 3, .out_features = 2});
  set_values(fc.weight(), {0.1f, -0.2f, 0.3f, 0.5f, 0.0f, -0.5f});
  set_values(*fc.bias(), {0.5f, -1.0f});
  const Tensor x = Tensor::from_values({2, 3}, {1, 2, 3, -1, 0.5f, 2});
  // y = x w^T + b: row 0 is (0.1 - 0.4 + 0.9 + 0.5, 0.5 - 1.5 - 1), row 1 (-0.1 - 0.1 + 0.6 + 0.5, -0.5 - 1 - 1).
  expect_values(fc.forward(x, f.ctx), {1.1f, -2.0f, 0.9f, -2.5f}, 1e-6f, "y");
  const Tensor dy = Tensor::from_values({2, 2}, {1, -1, 2, 0.5f});
  const Tensor dx = fc.backward(dy, f.ctx);
  // dx = dy w; dw = dy^T x; db = the column sums of dy.
  expect_values(dx, {-0.4f, -0.2f, 0.8f, 0.45f, -0.4f, 0.35f}, 1e-6f, "dx");
  expect_values(fc.weight().grad, {-1, 3, 7, -1.5f, -1.75f, -2}, 1e-6f, "dw");
  expect_values(fc.bias()->grad, {3, -0.5f}, 1e-6f, "db");
}

TEST(Linear, ABatchSplitAcrossTasksMatchesADoubleLoop) {
  // 64 x 128 -> 96: the kernels cut the rows of y, dx and dw into several blocks.
  constexpr std::int64_t n = 64, in = 128, out = 96;
  CpuFixture f;
  Linear fc({.in_features = in, .out_features = out, .seed = 5});
  const Tensor x = random_tensor({n, in}, 21);
  const Tensor dy = random_tensor({n, out}, 22);
  const Tensor y = fc.forward(x, f.ctx);
  const Tensor dx = fc.backward(dy, f.ctx);
  const auto xv = x.f32(), dyv = dy.f32(), w = fc.weight().value.f32(), b = fc.bias()->value.f32();
  const auto yv = y.f32(), dxv = dx.f32(), dw = fc.weight().grad.f32(), db = fc.bias()->grad.f32();
  const auto at = [](std::int64_t row, std::int64_t cols, std::int64_t col) {
    return static_cast<std::size_t>(row * cols + col);
  };
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t o = 0; o < out; ++o) {
      auto sum = static_cast<double>(b[static_cast<std::size_t>(o)]);
      for (std::int64_t k = 0; k < in; ++k)
        sum += static_cast<double>(xv[at(i, in, k)]) * static_cast<double>(w[at(o, in, k)]);
      ASSERT_NEAR(yv[at(i, out, o)], sum, 1e-4) << "y[" << i << ", " << o << "]";
    }
    for (std::int64_t k = 0; k < in; ++k) {
      double sum = 0;
      for (std::int64_t o = 0; o < out; ++o)
        sum += static_cast<double>(dyv[at(i, out, o)]) * static_cast<double>(w[at(o, in, k)]);
      ASSERT_NEAR(dxv[at(i, in, k)], sum, 1e-4) << "dx[" << i << ", " << k << "]";
    }
  }
  for (std::int64_t o = 0; o < out; ++o) {
    double bias_sum = 0;
    for (std::int64_t i = 0; i < n; ++i) bias_sum += static_cast<double>(dyv[at(i, out, o)]);
    ASSERT_NEAR(db[static_cast<std::size_t>(o)], bias_sum, 1e-4) << "db[" << o << "]";
    for (std::int64_t k = 0; k < in; ++k) {
      double sum = 0;
      for (std::int64_t i = 0; i < n; ++i)
        sum += static_cast<double>(dyv[at(i, out, o)]) * static_cast<double>(xv[at(i, in, k)]);
      ASSERT_NEAR(dw[at(o, in, k)], sum, 1e-4) << "dw[" << o << ", " << k << "]";
    }
  }
}

TEST(Linear, InitialisesWithinPyTorchsBoundAsAFunctionOfTheSeed) {
  Linear a({.in_features = 16, .out_features = 8, .seed = 1});
  Linear b({.in_features = 16, .out_features = 8, .seed = 1});
  Linear c({.in_features = 16, .out_features = 8, .seed = 2});
  const double bound = 1.0 / std::sqrt(16.0);  // 1/sqrt(in_features), for weight and bias alike
  for (Parameter* p : {&b.weight(), b.bias()}) {
    for (const float v : p->value.f32()) {
      EXPECT_GE(v, -bound);
      EXPECT_LE(v, bound);
    }
  }
  EXPECT_EQ(a.weight().value.to_vector(), b.weight().value.to_vector());
  EXPECT_EQ(a.bias()->value.to_vector(), b.bias()->value.to_vector());
  EXPECT_NE(b.weight().value.to_vector(), c.weight().value.to_vector());
}

TEST(Linear, NamesItsParametersAsPyTorchAndDescribesItself) {
  Linear fc({.in_features = 512, .out_features = 10});
  EXPECT_EQ(fc.describe(), "Linear(in_features=512, out_features=10, bias=True)");
  std::vector<std::string> names;
  fc.for_each_parameter(
      [&](const std::string& name, Parameter& p) {
        names.push_back(name);
        EXPECT_EQ(p.decay, name == "fc.weight") << name;
      },
      "fc");
  EXPECT_EQ(names, (std::vector<std::string>{"fc.weight", "fc.bias"}));

  Linear plain({.in_features = 4, .out_features = 2, .bias = false});
  EXPECT_EQ(plain.describe(), "Linear(in_features=4, out_features=2, bias=False)");
  EXPECT_EQ(plain.bias(), nullptr);
}

TEST(Linear, ParameterGradientsAccumulateOverBackwardPasses) {
  CpuFixture f;
  Linear fc({.in_features = 3, .out_features = 2, .seed = 4});
  const Tensor x = random_tensor({2, 3}, 8);
  const Tensor dy = random_tensor({2, 2}, 9);
  (void)fc.forward(x, f.ctx);
  (void)fc.backward(dy, f.ctx);
  const std::vector<float> dw = fc.weight().grad.to_vector();
  const std::vector<float> db = fc.bias()->grad.to_vector();
  (void)fc.forward(x, f.ctx);
  (void)fc.backward(dy, f.ctx);
  const std::vector<float> dw2 = fc.weight().grad.to_vector();
  const std::vector<float> db2 = fc.bias()->grad.to_vector();
  for (std::size_t i = 0; i < dw.size(); ++i) EXPECT_FLOAT_EQ(dw2[i], 2 * dw[i]) << "dw " << i;
  for (std::size_t i = 0; i < db.size(); ++i) EXPECT_FLOAT_EQ(db2[i], 2 * db[i]) << "db " << i;
}

TEST(Linear, KernelSkipsTheGradientsNobodyAsksFor) {
  CpuFixture f;
  const Tensor x = Tensor::from_values({1, 2}, {1, 2});
  const Tensor w = Tensor::from_values({1, 2}, {3, 4});
  const Tensor dy = Tensor::from_values({1, 1}, {2});
  const Tensor dw = Tensor::zeros({1, 2});
  f.backend->linear_backward(x, w, dy, Tensor(), dw, Tensor());
  expect_values(dw, {2, 4}, 0, "dw");
  const Tensor dx({1, 2});
  f.backend->linear_backward(x, w, dy, dx, Tensor(), Tensor());
  expect_values(dx, {6, 8}, 0, "dx");
  expect_values(dw, {2, 4}, 0, "dw untouched");
}

TEST(Linear, RejectsBadShapesNamingTheLayer) {
  using gpu::test::expect_throw_mentioning;
  CpuFixture f;
  Linear fc({.in_features = 3, .out_features = 2});
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)fc.forward(Tensor({2, 4}), f.ctx);
      },
      "Linear(in_features=3, out_features=2, bias=True): the input is "
      "f32[2, 4]");
  expect_throw_mentioning<std::invalid_argument>([&] { (void)fc.forward(Tensor({2, 3, 1, 1}), f.ctx); }, "[N, 3]");
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)fc.forward(Tensor({2, 3}, DType::u8), f.ctx);
      },
      "not floating point");
  (void)fc.forward(random_tensor({2, 3}, 1), f.ctx);
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)fc.backward(Tensor({2, 3}), f.ctx);
      },
      "the output gradient is f32[2, 3] nchw cpu, expected [2, 2]");
  expect_throw_mentioning<std::invalid_argument>([] { Linear bad({.in_features = 0, .out_features = 2}); },
                                                 "in_features (0)");
  // eval keeps nothing: no backward after it.
  Context eval{.backend = *f.backend, .mode = Mode::eval};
  (void)fc.forward(random_tensor({2, 3}, 1), eval);
  EXPECT_THROW((void)fc.backward(Tensor({2, 2}), eval), std::logic_error);
}

}  // namespace
}  // namespace stoke::nn
