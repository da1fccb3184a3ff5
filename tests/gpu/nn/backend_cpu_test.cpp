// CpuBackend's kernels that no layer test covers on its own: sgd_update against hand-computed
// steps, cast, all_finite, scale, and the aliasing the elementwise kernels allow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include <stoke/gpu/dtype.hpp>
#include <stoke/gpu/nn/backend.hpp>

#include "../expect_throw.hpp"
#include "gradcheck.hpp"

namespace stoke::gpu::nn {
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
  test::expect_throw_mentioning<std::invalid_argument>(
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
  test::expect_throw_mentioning<std::invalid_argument>([&] { cpu->cast(Tensor({2}, DType::i32), Tensor({2})); },
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
  test::expect_throw_mentioning<std::invalid_argument>([&] { cpu->add(a, Tensor({4}), a); }, "differ in element count");
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

}  // namespace
}  // namespace stoke::gpu::nn
