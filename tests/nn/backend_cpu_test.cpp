// CpuBackend's kernels that no layer test covers on its own: sgd_update against hand-computed
// steps, cast, all_finite, scale, and the aliasing the elementwise kernels allow; and the paths
// the layer tests' small shapes do not reach: convolution over tiles of several images, the 2x2
// max pooling shortcut, batch norm's blocked sums, and empty()'s reuse of memory.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <stoke/gpu/dtype.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/blas.hpp>
#include <string>
#include <vector>

#include "../gpu/expect_throw.hpp"
#include "gradcheck.hpp"
#include "loss_scaler_checks.hpp"

namespace stoke::nn {
namespace {

struct BackendFixture : ::testing::Test {
  std::unique_ptr<Backend> cpu = make_backend(Device::cpu());
};

// Runs sgd_update once per gradient in `grads` on a parameter {p0, -p0} (mirrored gradients, so
// both signs are covered) and returns the parameter's first element after each step.
std::vector<float> sgd_steps(Backend& backend, float p0, const std::vector<float>& grads, const SgdStep& step) {
  const Tensor param = Tensor::from_values({2}, {p0, -p0});
  const Tensor buffer = Tensor::zeros({2});
  std::vector<float> after;
  for (const float g : grads) {
    backend.sgd_update(param, Tensor::from_values({2}, {g, -g}), step.momentum != 0 ? buffer : Tensor(), step);
    const std::vector<float> values = param.to_vector();
    EXPECT_EQ(values[1], -values[0]);
    after.push_back(values[0]);
  }
  return after;
}

void expect_near_each(const std::vector<float>& actual, const std::vector<float>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-6) << "step " << i + 1;
}

// Expected values worked by hand from SgdStep's formula (backend.hpp); torch.optim.SGD with the
// same settings prints the same numbers to float precision.
TEST_F(BackendFixture, SgdWithMomentum) {
  // lr 0.1, momentum 0.9, p = 1, gradients 1, 2, -1:
  //   buf 1     p 1 - 0.1          = 0.9
  //   buf 2.9   p 0.9 - 0.29       = 0.61
  //   buf 1.61  p 0.61 - 0.161     = 0.449
  expect_near_each(sgd_steps(*cpu, 1, {1, 2, -1}, {.lr = 0.1f, .momentum = 0.9f}), {0.9f, 0.61f, 0.449f});
}

TEST_F(BackendFixture, SgdWithNesterovMomentum) {
  // step = g + 0.9 buf:
  //   buf 1     step 1.9    p 1 - 0.19         = 0.81
  //   buf 2.9   step 4.61   p 0.81 - 0.461     = 0.349
  //   buf 1.61  step 0.449  p 0.349 - 0.0449   = 0.3041
  expect_near_each(sgd_steps(*cpu, 1, {1, 2, -1}, {.lr = 0.1f, .momentum = 0.9f, .nesterov = true}),
                   {0.81f, 0.349f, 0.3041f});
}

TEST_F(BackendFixture, SgdWithWeightDecay) {
  // weight decay 0.1, p = 2, gradients 1, 1:
  //   g 1 + 0.2 = 1.2       buf 1.2                p 2 - 0.12        = 1.88
  //   g 1 + 0.188 = 1.188   buf 1.08 + 1.188 = 2.268  p 1.88 - 0.2268  = 1.6532
  expect_near_each(sgd_steps(*cpu, 2, {1, 1}, {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.1f}), {1.88f, 1.6532f});
}

TEST_F(BackendFixture, SgdScalesTheGradientAndNeedsNoBufferWithoutMomentum) {
  // grad_scale 0.25, lr 0.5, no momentum, p = 1, gradients 4, 4: g = 1, so p 0.5, then 0.
  expect_near_each(sgd_steps(*cpu, 1, {4, 4}, {.lr = 0.5f, .momentum = 0, .grad_scale = 0.25f}), {0.5f, 0.0f});
}

TEST_F(BackendFixture, SgdRejectsMismatchedTensors) {
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] { cpu->sgd_update(Tensor::zeros({3}), Tensor::zeros({2}), Tensor::zeros({3}), {}); },
      "the gradient f32[2] nchw cpu has 2 elements, the parameter 3");
}

TEST_F(BackendFixture, CastRoundsToNearestEvenAndRoundTrips) {
  const float third = 1.0f / 3.0f;
  const Tensor src = Tensor::from_values({4}, {1.5f, third, -2.75f, 65504.0f});
  const Tensor bf16({4}, DType::bf16);
  cpu->cast(src, bf16);
  const std::uint16_t* b = bf16.data_as<const std::uint16_t>();
  EXPECT_EQ(b[0], 0x3fc0);  // 1.5 exactly
  EXPECT_EQ(b[1], bf16_from_float(third));
  EXPECT_EQ(b[1], 0x3eab);  // 0x3eaaaaab: the dropped half 0xaaab is above half way, so up
  EXPECT_EQ(b[2], bf16_from_float(-2.75f));
  const Tensor f16({4}, DType::f16);
  cpu->cast(src, f16);
  const std::uint16_t* h = f16.data_as<const std::uint16_t>();
  EXPECT_EQ(h[0], 0x3e00);  // 1.5 exactly
  EXPECT_EQ(h[1], f16_from_float(third));
  EXPECT_EQ(h[1], 0x3555);
  EXPECT_EQ(h[3], 0x7bff);  // 65504, binary16's largest finite value

  const Tensor back({4});
  cpu->cast(bf16, back);
  EXPECT_EQ(back.to_vector(), (std::vector<float>{1.5f, float_from_bf16(0x3eab), -2.75f, 65536.0f}));
  cpu->cast(f16, back);
  EXPECT_EQ(back.to_vector(), (std::vector<float>{1.5f, float_from_f16(0x3555), -2.75f, 65504.0f}));

  // bf16 -> f16 converts the bf16's value (exact in float) with one rounding.
  const Tensor via({4}, DType::f16);
  cpu->cast(bf16, via);
  EXPECT_EQ(via.data_as<const std::uint16_t>()[1], f16_from_float(float_from_bf16(0x3eab)));
  EXPECT_EQ(via.data_as<const std::uint16_t>()[3], 0x7c00) << "65536 is past binary16's range: infinity";

  const Tensor copy({4});
  cpu->cast(src, copy);  // the same dtype: a copy
  EXPECT_EQ(copy.to_vector(), src.to_vector());
}

TEST_F(BackendFixture, CastRejectsIntegers) {
  gpu::test::expect_throw_mentioning<std::invalid_argument>([&] { cpu->cast(Tensor({2}, DType::i32), Tensor({2})); },
                                                            "cast converts between f32, bf16 and f16");
}

TEST_F(BackendFixture, AllFiniteFindsNanAndInfinity) {
  Tensor big = Tensor::zeros({300000});  // several oneTBB chunks
  EXPECT_TRUE(cpu->all_finite(big));
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    big.f32()[299999] = bad;
    EXPECT_FALSE(cpu->all_finite(big)) << bad;
    big.f32()[299999] = 0;
  }
  EXPECT_FALSE(cpu->all_finite(Tensor::from_values({3}, {1, std::numeric_limits<float>::quiet_NaN(), 2})));

  const Tensor bf16({3}, DType::bf16);
  std::uint16_t* b = bf16.data_as<std::uint16_t>();
  b[0] = bf16_from_float(1);
  b[1] = bf16_from_float(-3e38f);
  b[2] = bf16_from_float(0.5f);
  EXPECT_TRUE(cpu->all_finite(bf16));
  b[1] = 0x7fc0;  // NaN
  EXPECT_FALSE(cpu->all_finite(bf16));
  b[1] = 0xff80;  // -infinity
  EXPECT_FALSE(cpu->all_finite(bf16));

  const Tensor f16({2}, DType::f16);
  f16.data_as<std::uint16_t>()[0] = f16_from_float(65504);
  f16.data_as<std::uint16_t>()[1] = f16_from_float(-1);
  EXPECT_TRUE(cpu->all_finite(f16));
  f16.data_as<std::uint16_t>()[1] = 0x7c00;  // infinity
  EXPECT_FALSE(cpu->all_finite(f16));
}

TEST_F(BackendFixture, TheLossScalerSkipsUnscalesAndUpdatesOnItsState) { testing::expect_loss_scaler_works(*cpu); }

TEST_F(BackendFixture, ScaleMultipliesInPlace) {
  const Tensor x = Tensor::from_values({3}, {1, 2, -3});
  cpu->scale(x, 0.5f);
  EXPECT_EQ(x.to_vector(), (std::vector<float>{0.5f, 1, -1.5f}));
}

TEST_F(BackendFixture, AddMayWriteOverEitherInput) {
  const Tensor a = Tensor::from_values({3}, {1, 2, 3});
  const Tensor b = Tensor::from_values({3}, {10, 20, 30});
  cpu->add(a, b, a);
  EXPECT_EQ(a.to_vector(), (std::vector<float>{11, 22, 33}));
  cpu->add(a, b, b);
  EXPECT_EQ(b.to_vector(), (std::vector<float>{21, 42, 63}));
  cpu->add(a, a, a);
  EXPECT_EQ(a.to_vector(), (std::vector<float>{22, 44, 66}));

  const Tensor big = testing::random_tensor({200000}, 1);  // several oneTBB chunks
  const std::vector<float> before = big.to_vector();
  cpu->add(big, big, big);
  const auto after = big.f32();
  for (std::size_t i = 0; i < before.size(); ++i) ASSERT_EQ(after[i], 2 * before[i]) << "element " << i;
  gpu::test::expect_throw_mentioning<std::invalid_argument>([&] { cpu->add(a, Tensor({4}), a); },
                                                            "differ in element count");
}

TEST_F(BackendFixture, ReluMayWorkInPlace) {
  const Tensor x = Tensor::from_values({4}, {-1, 2, -3, 4});
  cpu->relu_forward(x, x);
  EXPECT_EQ(x.to_vector(), (std::vector<float>{0, 2, 0, 4}));
  const Tensor dy = Tensor::from_values({4}, {5, 6, 7, 8});
  cpu->relu_backward(x, dy, dy);
  EXPECT_EQ(dy.to_vector(), (std::vector<float>{0, 6, 0, 8}));
}

TEST_F(BackendFixture, DropoutMaskIsTheSameWhateverTheThreading) {
  // 300k elements run on several oneTBB workers; the mask depends on (seed, index) only, so two
  // runs agree and the first 1000 elements agree with a run over a tensor of only 1000 (which runs
  // on one thread).
  const Tensor x = testing::random_tensor({300000}, 2);
  const Tensor y({300000});
  const Tensor mask1({300000}, DType::u8);
  const Tensor mask2({300000}, DType::u8);
  cpu->dropout_forward(x, 0.4f, 99, mask1, y);
  cpu->dropout_forward(x, 0.4f, 99, mask2, y);
  const Tensor small_x = testing::random_tensor({1000}, 3);
  const Tensor small_y({1000});
  const Tensor small_mask({1000}, DType::u8);
  cpu->dropout_forward(small_x, 0.4f, 99, small_mask, small_y);
  const std::uint8_t* m1 = mask1.data_as<const std::uint8_t>();
  const std::uint8_t* m2 = mask2.data_as<const std::uint8_t>();
  const std::uint8_t* ms = small_mask.data_as<const std::uint8_t>();
  for (std::size_t i = 0; i < 300000; ++i) ASSERT_EQ(m1[i], m2[i]) << "element " << i;
  for (std::size_t i = 0; i < 1000; ++i) ASSERT_EQ(m1[i], ms[i]) << "element " << i;
}

// ---- convolution over tiles of images, against the definition

// Index of element (i, c, y, x) of an NCHW tensor of shape s.
std::size_t at4(const Shape& s, std::int64_t i, std::int64_t c, std::int64_t y, std::int64_t x) {
  return static_cast<std::size_t>(((i * s[1] + c) * s[2] + y) * s[3] + x);
}

// Calls f(i, oc, oy, ox, ic, ky, kx) for every term of the convolution whose input cell is real
// (not padding): the definition the three kernels are adjoints of.
template <class F>
void for_each_term(const Conv2dGeometry& g, const Shape& x, const F& f) {
  const std::int64_t ho = g.output_size(x[2]), wo = g.output_size(x[3]);
  const std::int64_t in_per_group = g.in_channels / g.groups, out_per_group = g.out_channels / g.groups;
  for (std::int64_t i = 0; i < x[0]; ++i) {
    for (std::int64_t oc = 0; oc < g.out_channels; ++oc) {
      for (std::int64_t oy = 0; oy < ho; ++oy) {
        for (std::int64_t ox = 0; ox < wo; ++ox) {
          for (std::int64_t c = 0; c < in_per_group; ++c) {
            for (std::int64_t ky = 0; ky < g.kernel; ++ky) {
              for (std::int64_t kx = 0; kx < g.kernel; ++kx) {
                const std::int64_t iy = oy * g.stride - g.padding + ky * g.dilation;
                const std::int64_t ix = ox * g.stride - g.padding + kx * g.dilation;
                if (iy < 0 || iy >= x[2] || ix < 0 || ix >= x[3]) continue;
                f(i, oc, oy, ox, oc / out_per_group * in_per_group + c, c, ky, kx, iy, ix);
              }
            }
          }
        }
      }
    }
  }
}

Tensor ones(const Shape& shape) {
  Tensor t(shape);
  for (float& v : t.f32()) v = 1;
  return t;
}

void expect_close(const std::vector<float>& actual, const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], 1e-4 + 1e-4 * std::abs(expected[i])) << what << " element " << i;
  }
}

TEST_F(BackendFixture, ConvolutionInTilesOfImagesMatchesTheDefinition) {
  // Batches of 24 small planes: the kernels put several images side by side in one GEMM (the
  // tiles), which the layer tests' batches of 2 or 3 never do; a batch of 1 runs one image alone.
  struct Case {
    const char* name;
    Conv2dGeometry g;
    Shape x;
    bool bias;
  };
  const std::vector<Case> cases{
      {"3x3 same", {.in_channels = 3, .out_channels = 5, .kernel = 3, .padding = 1}, {24, 3, 5, 6}, false},
      {"3x3 same, one image", {.in_channels = 3, .out_channels = 5, .kernel = 3, .padding = 1}, {1, 3, 5, 6}, true},
      {"3x3 same, 1x1 planes", {.in_channels = 4, .out_channels = 3, .kernel = 3, .padding = 1}, {24, 4, 1, 1}, true},
      {"5x5 same", {.in_channels = 2, .out_channels = 3, .kernel = 5, .padding = 2}, {24, 2, 6, 4}, true},
      {"3x3 dilation 2 same",
       {.in_channels = 2, .out_channels = 4, .kernel = 3, .padding = 2, .dilation = 2},
       {24, 2, 5, 7},
       false},
      {"3x3 no padding", {.in_channels = 3, .out_channels = 4, .kernel = 3}, {24, 3, 6, 5}, true},
      {"3x3 stride 2",
       {.in_channels = 3, .out_channels = 4, .kernel = 3, .stride = 2, .padding = 1},
       {24, 3, 7, 6},
       false},
      {"1x1", {.in_channels = 5, .out_channels = 3, .kernel = 1}, {24, 5, 3, 4}, true},
      {"3x3 groups 2",
       {.in_channels = 4, .out_channels = 6, .kernel = 3, .padding = 1, .groups = 2},
       {24, 4, 4, 5},
       false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Conv2dGeometry& g = c.g;
    const Shape y_shape{c.x[0], g.out_channels, g.output_size(c.x[2]), g.output_size(c.x[3])};
    const Tensor x = testing::random_tensor(c.x, 1);
    const Tensor w = testing::random_tensor(g.weight_shape(), 2);
    const Tensor b = c.bias ? testing::random_tensor({g.out_channels}, 3) : Tensor();
    const Tensor dy = testing::random_tensor(y_shape, 4);
    const auto xv = x.f32(), wv = w.f32(), dyv = dy.f32();
    const Shape w_shape = g.weight_shape();

    std::vector<double> y_ref(static_cast<std::size_t>(element_count(y_shape)), 0.0);
    std::vector<double> dx_ref(xv.size(), 0.0), dw_ref(wv.size(), 0.0),
        db_ref(static_cast<std::size_t>(g.out_channels));
    for (std::int64_t i = 0; i < y_shape[0]; ++i) {
      for (std::int64_t oc = 0; oc < g.out_channels; ++oc) {
        for (std::int64_t oy = 0; oy < y_shape[2]; ++oy) {
          for (std::int64_t ox = 0; ox < y_shape[3]; ++ox) {
            const std::size_t o = at4(y_shape, i, oc, oy, ox);
            if (c.bias) y_ref[o] = static_cast<double>(b.f32()[static_cast<std::size_t>(oc)]);
            db_ref[static_cast<std::size_t>(oc)] += static_cast<double>(dyv[o]);
          }
        }
      }
    }
    for_each_term(g, c.x,
                  [&](std::int64_t i, std::int64_t oc, std::int64_t oy, std::int64_t ox, std::int64_t ic,
                      std::int64_t wc, std::int64_t ky, std::int64_t kx, std::int64_t iy, std::int64_t ix) {
                    const std::size_t xi = at4(c.x, i, ic, iy, ix), wi = at4(w_shape, oc, wc, ky, kx),
                                      yi = at4(y_shape, i, oc, oy, ox);
                    y_ref[yi] += static_cast<double>(xv[xi]) * static_cast<double>(wv[wi]);
                    dx_ref[xi] += static_cast<double>(dyv[yi]) * static_cast<double>(wv[wi]);
                    dw_ref[wi] += static_cast<double>(dyv[yi]) * static_cast<double>(xv[xi]);
                  });

    const Tensor y(y_shape);
    cpu->conv2d_forward(g, x, w, b, y);
    expect_close(y.to_vector(), y_ref, "y");
    const Tensor dx(c.x);
    cpu->conv2d_backward_data(g, dy, w, dx);
    expect_close(dx.to_vector(), dx_ref, "dx");
    // The filter gradient accumulates: start from 1 and expect 1 more; twice, bit for bit alike.
    const Tensor dw = ones(w_shape);
    const Tensor db = c.bias ? ones({g.out_channels}) : Tensor();
    const Tensor dw_again = ones(w_shape);
    cpu->conv2d_backward_filter(g, x, dy, dw, db);
    cpu->conv2d_backward_filter(g, x, dy, dw_again, Tensor());
    for (double& v : dw_ref) v += 1;
    expect_close(dw.to_vector(), dw_ref, "dw");
    EXPECT_EQ(dw.to_vector(), dw_again.to_vector());
    if (c.bias) {
      for (double& v : db_ref) v += 1;
      expect_close(db.to_vector(), db_ref, "db");
    }
  }
}

// ---- max pooling's 2x2 shortcut, against window_argmax's rule written out

TEST_F(BackendFixture, MaxPool2x2FollowsTheScanRuleOnTiesAndNaNs) {
  // Values from {-1, 0, 1} make ties common; every 7th is a NaN, so windows hold one, two or none.
  const Shape shape{3, 4, 6, 7};  // an odd width: the last column is in no window
  Tensor x(shape);
  const auto xv = x.f32();
  const Tensor noise = testing::random_tensor(shape, 7, -1.5, 1.5);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    xv[i] = i % 7 == 3 ? std::numeric_limits<float>::quiet_NaN() : std::round(noise.f32()[i]);
  }
  const Pool2dGeometry g{.kernel = 2, .stride = 2, .padding = 0};
  const Shape y_shape{3, 4, 3, 3};
  const Tensor dy = testing::random_tensor(y_shape, 8);
  const Tensor y(y_shape), dx(shape);
  cpu->max_pool2d_forward(g, x, y);
  cpu->max_pool2d_backward(g, x, y, dy, dx);

  std::vector<float> dx_ref(xv.size(), 0.0f);
  const auto yv = y.f32();
  for (std::int64_t p = 0; p < 12; ++p) {
    for (std::int64_t oh = 0; oh < 3; ++oh) {
      for (std::int64_t ow = 0; ow < 3; ++ow) {
        // The scan: the first cell, then any larger one or the first NaN after a number.
        std::size_t best = at4(shape, 0, p, 2 * oh, 2 * ow);
        for (std::int64_t cell = 1; cell < 4; ++cell) {
          const std::size_t at = at4(shape, 0, p, 2 * oh + cell / 2, 2 * ow + cell % 2);
          if (xv[at] > xv[best] || (std::isnan(xv[at]) && !std::isnan(xv[best]))) best = at;
        }
        const std::size_t out = at4(y_shape, 0, p, oh, ow);
        if (std::isnan(xv[best])) {
          EXPECT_TRUE(std::isnan(yv[out])) << "window " << out;
        } else {
          EXPECT_EQ(yv[out], xv[best]) << "window " << out;
        }
        dx_ref[best] = dy.f32()[out];
      }
    }
  }
  EXPECT_EQ(dx.to_vector(), dx_ref);
}

// ---- batch norm's sums over blocks of a plane, against sums in double

TEST_F(BackendFixture, BatchNormSumsOverPlanesLargerThanABlock) {
  // 37 x 41 = 1517 values per plane: a full block of 1024 and a tail that is no multiple of the
  // lanes; the values sit far from zero, where a one-pass variance would cancel.
  const Shape shape{3, 2, 37, 41};
  const std::int64_t hw = 37 * 41, m = 3 * hw;
  const Tensor x = testing::random_tensor(shape, 9, 99, 101);
  const Tensor dy = testing::random_tensor(shape, 10);
  const Tensor gamma = Tensor::from_values({2}, {1.5f, -0.5f});
  const Tensor beta = Tensor::from_values({2}, {0.25f, 0.5f});
  const Tensor running_mean = Tensor::zeros({2}), running_var = Tensor::from_values({2}, {1, 1});
  const Tensor y(shape), mean({2}), invstd({2}), dx(shape);
  const Tensor dgamma = Tensor::zeros({2}), dbeta = Tensor::zeros({2});
  cpu->batch_norm_forward_training(x, gamma, beta, running_mean, running_var, 0.1, 1e-5, y, mean, invstd);
  cpu->batch_norm_backward(x, dy, gamma, mean, invstd, dx, dgamma, dbeta);

  const auto xv = x.f32(), dyv = dy.f32();
  for (std::int64_t c = 0; c < 2; ++c) {
    SCOPED_TRACE("channel " + std::to_string(c));
    const auto element = [&](std::int64_t i, std::int64_t k) { return static_cast<std::size_t>((i * 2 + c) * hw + k); };
    double sum = 0, squares = 0, sum_dy = 0, sum_dy_xc = 0;
    for (std::int64_t i = 0; i < 3; ++i) {
      for (std::int64_t k = 0; k < hw; ++k) sum += static_cast<double>(xv[element(i, k)]);
    }
    const double mu = sum / static_cast<double>(m);
    for (std::int64_t i = 0; i < 3; ++i) {
      for (std::int64_t k = 0; k < hw; ++k) {
        const double d = static_cast<double>(xv[element(i, k)]) - mu;
        squares += d * d;
        sum_dy += static_cast<double>(dyv[element(i, k)]);
        sum_dy_xc += static_cast<double>(dyv[element(i, k)]) * d;
      }
    }
    const double is = 1 / std::sqrt(squares / static_cast<double>(m) + 1e-5);
    const double g = static_cast<double>(gamma.f32()[static_cast<std::size_t>(c)]);
    const double bt = static_cast<double>(beta.f32()[static_cast<std::size_t>(c)]);
    EXPECT_NEAR(mean.f32()[static_cast<std::size_t>(c)], mu, 1e-5);
    EXPECT_NEAR(invstd.f32()[static_cast<std::size_t>(c)], is, 1e-4 * is);
    EXPECT_NEAR(dbeta.f32()[static_cast<std::size_t>(c)], sum_dy, 1e-3);
    EXPECT_NEAR(dgamma.f32()[static_cast<std::size_t>(c)], sum_dy_xc * is, 1e-3);
    for (std::int64_t i = 0; i < 3; ++i) {
      for (std::int64_t k = 0; k < hw; k += 13) {
        const std::size_t e = element(i, k);
        const double xhat = (static_cast<double>(xv[e]) - mu) * is;
        ASSERT_NEAR(y.f32()[e], g * xhat + bt, 2e-4) << "y at " << k;
        const double expected_dx = g * is *
                                   (static_cast<double>(dyv[e]) - sum_dy / static_cast<double>(m) -
                                    xhat * sum_dy_xc * is / static_cast<double>(m));
        ASSERT_NEAR(dx.f32()[e], expected_dx, 2e-4) << "dx at " << k;
      }
    }
  }
}

// ---- empty()'s memory

TEST_F(BackendFixture, EmptyReusesTheMemoryOfDroppedTensorsAndTheyMayOutliveIt) {
  const Shape big{64, 32, 16, 16};  // 2 MiB: pooled
  void* first = nullptr;
  {
    const Tensor t = cpu->empty(big, DType::f32, TensorLayout::nchw);
    first = t.data();
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first) % 64, 0u);
  }
  const Tensor again = cpu->empty(big, DType::f32, TensorLayout::nchw);
  EXPECT_EQ(again.data(), first);  // the dropped block, handed out again
  const Tensor other = cpu->empty(big, DType::f32, TensorLayout::nchw);
  EXPECT_NE(other.data(), first);  // while `again` holds it, a new one
  const Tensor small = cpu->empty({3, 4}, DType::f32, TensorLayout::nchw);
  EXPECT_EQ(small.shape(), (Shape{3, 4}));

  // A tensor outlives its backend: its block is freed, not cached, when it goes.
  auto backend = make_backend(Device::cpu());
  Tensor survivor = backend->empty(big, DType::f32, TensorLayout::nchw);
  backend.reset();
  std::memset(survivor.data(), 0, survivor.bytes());
  survivor = Tensor();
  const auto negative = [&] { (void)cpu->empty({-1, 4}, DType::f32, TensorLayout::nchw); };
  gpu::test::expect_throw_mentioning<std::invalid_argument>(negative, "negative dimension");
}

// OpenBLAS's own choice stands unless the CPU has better units than its kernels use: a CPU it
// does not know gets SSE3 ("Prescott") kernels, AMD's Zen 4 AVX2 ones.
TEST(BlasKernels, BetterKernelsWhereTheCpuHasBetterUnits) {
  EXPECT_EQ(better_blas_kernels("Prescott", VectorUnits::avx512), "SkylakeX");
  EXPECT_EQ(better_blas_kernels("Haswell", VectorUnits::avx512), "SkylakeX");
  EXPECT_EQ(better_blas_kernels("Zen", VectorUnits::avx512), "SkylakeX");
  EXPECT_EQ(better_blas_kernels("Prescott", VectorUnits::avx2), "Haswell");
  EXPECT_EQ(better_blas_kernels("Sandybridge", VectorUnits::avx2), "Haswell");
  EXPECT_EQ(better_blas_kernels("SkylakeX", VectorUnits::avx512), "");
  EXPECT_EQ(better_blas_kernels("SapphireRapids", VectorUnits::avx512), "");
  EXPECT_EQ(better_blas_kernels("Zen", VectorUnits::avx2), "");
  EXPECT_EQ(better_blas_kernels("SkylakeX", VectorUnits::avx2), "");
  EXPECT_EQ(better_blas_kernels("Prescott", VectorUnits::older), "");
}

}  // namespace
}  // namespace stoke::nn
