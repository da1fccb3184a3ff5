// Conv2d on the CPU backend: forward against a direct (seven-loop) convolution, numeric gradient
// checks over strides, padding, dilation, groups and depthwise, a case small enough to do by
// hand, gradient accumulation, and the errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <stoke/nn/conv2d.hpp>
#include <string>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"

namespace stoke::nn {
namespace {

using testing::CpuFixture;
using testing::expect_gradients_match;
using testing::random_tensor;

// The definition of a (grouped, dilated, strided, padded) convolution, term by term.
std::vector<float> direct_conv(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::int64_t n = x.dim(0), h = x.dim(2), wd = x.dim(3);
  const std::int64_t ho = g.output_size(h), wo = g.output_size(wd);
  const std::int64_t in_per_group = g.in_channels / g.groups, out_per_group = g.out_channels / g.groups;
  const auto xv = x.f32();
  const auto wv = w.f32();
  std::vector<float> y(static_cast<std::size_t>(n * g.out_channels * ho * wo));
  std::size_t at = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t oc = 0; oc < g.out_channels; ++oc) {
      const std::int64_t group = oc / out_per_group;
      for (std::int64_t oy = 0; oy < ho; ++oy) {
        for (std::int64_t ox = 0; ox < wo; ++ox) {
          double sum = b.defined() ? static_cast<double>(b.f32()[static_cast<std::size_t>(oc)]) : 0.0;
          for (std::int64_t c = 0; c < in_per_group; ++c) {
            for (std::int64_t ky = 0; ky < g.kernel; ++ky) {
              for (std::int64_t kx = 0; kx < g.kernel; ++kx) {
                const std::int64_t iy = oy * g.stride - g.padding + ky * g.dilation;
                const std::int64_t ix = ox * g.stride - g.padding + kx * g.dilation;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const std::int64_t ic = group * in_per_group + c;
                const float xi = xv[static_cast<std::size_t>(((i * g.in_channels + ic) * h + iy) * wd + ix)];
                const float wi =
                    wv[static_cast<std::size_t>(((oc * in_per_group + c) * g.kernel + ky) * g.kernel + kx)];
                sum += static_cast<double>(xi) * static_cast<double>(wi);
              }
            }
          }
          y[at++] = static_cast<float>(sum);
        }
      }
    }
  }
  return y;
}

struct Case {
  const char* name;
  Conv2dOptions options;
  Shape input;
};

// Each kernel path: im2col + GEMM (with and without padding, strided, dilated, grouped), the
// 1x1 shortcut, and the depthwise loops (with a channel multiplier too); odd sizes on purpose.
std::vector<Case> cases() {
  return {
      {"plain 3x3 pad 1", {.in_channels = 3, .out_channels = 4, .kernel = 3, .padding = 1, .seed = 1}, {2, 3, 5, 6}},
      {"stride 2",
       {.in_channels = 3, .out_channels = 4, .kernel = 3, .stride = 2, .padding = 1, .seed = 2},
       {2, 3, 7, 6}},
      {"dilation 2",
       {.in_channels = 2, .out_channels = 3, .kernel = 3, .padding = 1, .dilation = 2, .seed = 3},
       {2, 2, 6, 7}},
      {"groups 2",
       {.in_channels = 4, .out_channels = 6, .kernel = 3, .padding = 1, .groups = 2, .seed = 4},
       {2, 4, 5, 5}},
      {"depthwise",
       {.in_channels = 4, .out_channels = 4, .kernel = 3, .padding = 1, .groups = 4, .seed = 5},
       {2, 4, 6, 5}},
      {"depthwise stride 2 multiplier 2",
       {.in_channels = 3, .out_channels = 6, .kernel = 3, .stride = 2, .padding = 1, .groups = 3, .seed = 6},
       {2, 3, 7, 7}},
      {"1x1", {.in_channels = 5, .out_channels = 3, .kernel = 1, .seed = 7}, {2, 5, 4, 3}},
      {"1x1 stride 2", {.in_channels = 4, .out_channels = 3, .kernel = 1, .stride = 2, .seed = 8}, {2, 4, 5, 5}},
      {"bias, no padding", {.in_channels = 3, .out_channels = 2, .kernel = 3, .bias = true, .seed = 9}, {3, 3, 5, 4}},
      {"bias, 5x5 stride 3 pad 2",
       {.in_channels = 2, .out_channels = 3, .kernel = 5, .stride = 3, .padding = 2, .bias = true, .seed = 10},
       {2, 2, 8, 9}},
  };
}

// The layer's bias; a test of a layer without one is wrong.
Parameter& bias_of(Conv2d& conv) {
  Parameter* bias = conv.bias();
  if (bias == nullptr) throw std::logic_error(conv.describe() + " has no bias");
  return *bias;
}

void randomise_bias(Conv2d& conv, std::uint64_t seed) {
  if (conv.bias() != nullptr) bias_of(conv).value = random_tensor({conv.geometry().out_channels}, seed);
}

TEST(Conv2d, ForwardMatchesADirectConvolution) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    CpuFixture f;
    Conv2d conv(c.options);
    randomise_bias(conv, 99);
    const Tensor x = random_tensor(c.input, 11);
    const Tensor y = conv.forward(x, f.ctx);
    const Conv2dGeometry& g = conv.geometry();
    ASSERT_EQ(y.shape(), (Shape{c.input[0], g.out_channels, g.output_size(c.input[2]), g.output_size(c.input[3])}));
    const std::vector<float> expected =
        direct_conv(g, x, conv.weight().value, conv.bias() != nullptr ? bias_of(conv).value : Tensor());
    const std::vector<float> actual = y.to_vector();
    for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-4) << "element " << i;
  }
}

TEST(Conv2d, GradientsMatchCentralDifferences) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    CpuFixture f;
    Conv2d conv(c.options);
    randomise_bias(conv, 98);
    expect_gradients_match(conv, random_tensor(c.input, 12), f.ctx);
  }
}

// x = 1..9 (3x3), w = 1..4 (2x2), bias 0.5, dy = 1..4; checked with torch 1.13:
// torch.nn.Conv2d(1, 1, 2) with those weights, y.backward(dy).
TEST(Conv2d, HandComputedForwardAndBackward) {
  CpuFixture f;
  Conv2d conv({.in_channels = 1, .out_channels = 1, .kernel = 2, .bias = true});
  conv.weight().value = Tensor::from_values({1, 1, 2, 2}, {1, 2, 3, 4});
  bias_of(conv).value = Tensor::from_values({1}, {0.5f});
  const Tensor x = Tensor::from_values({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});

  const Tensor y = conv.forward(x, f.ctx);
  EXPECT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  // y00 = 1*1 + 2*2 + 4*3 + 5*4 + 0.5, and the window moves one step at a time.
  EXPECT_EQ(y.to_vector(), (std::vector<float>{37.5f, 47.5f, 67.5f, 77.5f}));

  const Tensor dx = conv.backward(Tensor::from_values({1, 1, 2, 2}, {1, 2, 3, 4}), f.ctx);
  // dx11 = dy00 w11 + dy01 w10 + dy10 w01 + dy11 w00 = 4 + 6 + 6 + 4.
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{1, 4, 4, 6, 20, 16, 9, 24, 16}));
  // dw00 = dy00 x00 + dy01 x01 + dy10 x10 + dy11 x11 = 1 + 4 + 12 + 20; db = 1 + 2 + 3 + 4.
  EXPECT_EQ(conv.weight().grad.to_vector(), (std::vector<float>{37, 47, 67, 77}));
  EXPECT_EQ(bias_of(conv).grad.to_vector(), (std::vector<float>{10}));
}

TEST(Conv2d, ParameterGradientsAccumulateOverBackwardPasses) {
  for (const int groups : {1, 4}) {  // the GEMM path and the depthwise path
    SCOPED_TRACE(groups);
    CpuFixture f;
    Conv2d conv({.in_channels = 4, .out_channels = 4, .kernel = 3, .padding = 1, .groups = groups, .bias = true});
    const Tensor x = random_tensor({3, 4, 5, 5}, 21);
    const Tensor dy = random_tensor({3, 4, 5, 5}, 22);
    (void)conv.forward(x, f.ctx);
    const std::vector<float> dx_once = conv.backward(dy, f.ctx).to_vector();
    const std::vector<float> dw_once = conv.weight().grad.to_vector();
    const std::vector<float> db_once = bias_of(conv).grad.to_vector();
    (void)conv.forward(x, f.ctx);
    // The input gradient is written, not accumulated.
    EXPECT_EQ(conv.backward(dy, f.ctx).to_vector(), dx_once);
    const std::vector<float> dw_twice = conv.weight().grad.to_vector();
    const std::vector<float> db_twice = bias_of(conv).grad.to_vector();
    for (std::size_t i = 0; i < dw_once.size(); ++i) EXPECT_FLOAT_EQ(dw_twice[i], 2 * dw_once[i]);
    for (std::size_t i = 0; i < db_once.size(); ++i) EXPECT_FLOAT_EQ(db_twice[i], 2 * db_once[i]);
  }
}

TEST(Conv2d, InitialisationIsHeNormalWithFanOutAndSeeded) {
  Conv2d conv({.in_channels = 64, .out_channels = 32, .kernel = 3, .bias = true, .seed = 5});
  const std::vector<float> w = conv.weight().value.to_vector();
  double sum = 0, squares = 0;
  for (const float v : w) {
    sum += static_cast<double>(v);
    squares += static_cast<double>(v) * static_cast<double>(v);
  }
  const double n = static_cast<double>(w.size());
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(squares / n, 2.0 / (32 * 9), 0.1 * 2.0 / (32 * 9));  // 18432 samples: a few % apart
  EXPECT_EQ(bias_of(conv).value.to_vector(), std::vector<float>(32, 0.0f));
  EXPECT_FALSE(bias_of(conv).decay);
  EXPECT_TRUE(conv.weight().decay);
  Conv2d same({.in_channels = 64, .out_channels = 32, .kernel = 3, .seed = 5});
  Conv2d other({.in_channels = 64, .out_channels = 32, .kernel = 3, .seed = 6});
  EXPECT_EQ(same.weight().value.to_vector(), w);
  EXPECT_NE(other.weight().value.to_vector(), w);
}

TEST(Conv2d, DescribesItselfAndNamesItsParametersAsPyTorch) {
  EXPECT_EQ(Conv2d({.in_channels = 3, .out_channels = 32, .kernel = 3, .padding = 1}).describe(),
            "Conv2d(3, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)");
  EXPECT_EQ(
      Conv2d({.in_channels = 4, .out_channels = 8, .kernel = 3, .stride = 2, .dilation = 2, .groups = 2, .bias = true})
          .describe(),
      "Conv2d(4, 8, kernel_size=(3, 3), stride=(2, 2), dilation=(2, 2), groups=2)");
  EXPECT_EQ(Conv2d({.in_channels = 4, .out_channels = 8, .kernel = 1}).describe(),
            "Conv2d(4, 8, kernel_size=(1, 1), stride=(1, 1), bias=False)");

  Conv2d conv({.in_channels = 2, .out_channels = 3, .kernel = 3, .bias = true});
  std::vector<std::string> names;
  conv.for_each_parameter(
      [&](const std::string& name, Parameter& p) {
        names.push_back(name);
        EXPECT_EQ(p.value.shape(), name == "conv1.weight" ? (Shape{3, 2, 3, 3}) : (Shape{3}));
      },
      "conv1");
  EXPECT_EQ(names, (std::vector<std::string>{"conv1.weight", "conv1.bias"}));
}

TEST(Conv2d, EvalModeKeepsNothingForBackward) {
  CpuFixture f;
  f.ctx.mode = Mode::eval;
  Conv2d conv({.in_channels = 2, .out_channels = 2, .kernel = 3, .padding = 1});
  const Tensor y = conv.forward(random_tensor({1, 2, 4, 4}, 3), f.ctx);
  gpu::test::expect_throw_mentioning<std::logic_error>([&] { (void)conv.backward(y, f.ctx); }, "Mode::train");
}

TEST(Conv2d, RejectsInputsThatDoNotFit) {
  CpuFixture f;
  Conv2d conv({.in_channels = 3, .out_channels = 32, .kernel = 3, .padding = 1});
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)conv.forward(random_tensor({2, 4, 8, 8}, 1), f.ctx);
      },
      "Conv2d(3, 32, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False): input f32[2, 4, 8, 8]");
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)conv.forward(random_tensor({2, 4, 8, 8}, 1), f.ctx);
      },
      "expected {N, 3, H, W}");
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)conv.forward(random_tensor({3, 8, 8}, 1), f.ctx);
      },
      "expected {N, 3, H, W}");

  Conv2d unpadded({.in_channels = 1, .out_channels = 1, .kernel = 5, .dilation = 2});  // reaches 9 pixels
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)unpadded.forward(random_tensor({1, 1, 8, 9}, 1), f.ctx);
      },
      "H and W at least 9");
  EXPECT_EQ(unpadded.forward(random_tensor({1, 1, 9, 9}, 1), f.ctx).shape(), (Shape{1, 1, 1, 1}));
}

TEST(Conv2d, RejectsBadOptionsNamingThem) {
  using gpu::test::expect_throw_mentioning;
  expect_throw_mentioning<std::invalid_argument>([] { Conv2d({.in_channels = 6, .out_channels = 8, .groups = 4}); },
                                                 "groups = 4 must divide in_channels = 6 and out_channels = 8");
  expect_throw_mentioning<std::invalid_argument>([] { Conv2d({.in_channels = 4, .out_channels = 6, .groups = 4}); },
                                                 "groups = 4");
  expect_throw_mentioning<std::invalid_argument>([] { Conv2d({.in_channels = 0, .out_channels = 6}); },
                                                 "in_channels = 0");
  expect_throw_mentioning<std::invalid_argument>([] { Conv2d({.in_channels = 3, .out_channels = -1}); },
                                                 "out_channels = -1");
  expect_throw_mentioning<std::invalid_argument>([] { Conv2d({.in_channels = 3, .out_channels = 3, .kernel = 0}); },
                                                 "kernel = 0");
  expect_throw_mentioning<std::invalid_argument>([] { Conv2d({.in_channels = 3, .out_channels = 3, .stride = 0}); },
                                                 "stride = 0");
  expect_throw_mentioning<std::invalid_argument>([] { Conv2d({.in_channels = 3, .out_channels = 3, .padding = -1}); },
                                                 "padding = -1");
  expect_throw_mentioning<std::invalid_argument>([] { Conv2d({.in_channels = 3, .out_channels = 3, .dilation = 0}); },
                                                 "dilation = 0");
}

}  // namespace
}  // namespace stoke::nn
