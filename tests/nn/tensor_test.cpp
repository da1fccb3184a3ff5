// nn's Tensor: ownership and views, shapes, reshape, copies and layout conversion.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <stoke/nn/tensor.hpp>
#include <vector>

#include "../gpu/expect_throw.hpp"

namespace stoke::nn {
namespace {

TEST(Tensor, OwnsAlignedMemoryOfItsShape) {
  const Tensor t({2, 3, 4, 5});
  EXPECT_TRUE(t.defined());
  EXPECT_TRUE(t.owning());
  EXPECT_EQ(t.numel(), 120);
  EXPECT_EQ(t.bytes(), 480u);
  EXPECT_EQ(t.dim(1), 3);
  EXPECT_EQ(t.dim(-1), 5);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
  EXPECT_EQ(t.describe(), "f32[2, 3, 4, 5] nchw cpu");
  EXPECT_THROW((void)t.dim(4), std::out_of_range);
}

TEST(Tensor, CopiesShareElementsAndViewsOwnNothing) {
  const Tensor a = Tensor::from_values({2, 2}, {1, 2, 3, 4});
  const Tensor b = a;  // NOLINT(performance-unnecessary-copy-initialization): the copy is the subject
  b.f32()[0] = 9;
  EXPECT_EQ(a.f32()[0], 9);
  std::vector<float> memory{5, 6};
  const Tensor view = Tensor::view_of(memory.data(), {2}, DType::f32);
  EXPECT_FALSE(view.owning());
  view.f32()[1] = 7;
  EXPECT_EQ(memory[1], 7);
}

TEST(Tensor, ZerosAndFromValuesCheckTheirArguments) {
  const Tensor z = Tensor::zeros({3});
  EXPECT_EQ(z.to_vector(), (std::vector<float>{0, 0, 0}));
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [] {
        (void)Tensor::from_values({2, 2}, {1, 2, 3});
      },
      "shape [2, 2] holds 4 elements, but 3 values");
  gpu::test::expect_throw_mentioning<std::invalid_argument>([] { (void)Tensor({2, -1}); }, "negative dimension");
}

TEST(Tensor, ReshapeKeepsTheElementsAndChecksTheCount) {
  const Tensor a = Tensor::from_values({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = a.reshape({3, 2});
  EXPECT_EQ(b.data(), a.data());
  EXPECT_EQ(b.shape(), (Shape{3, 2}));
  gpu::test::expect_throw_mentioning<std::invalid_argument>([&] { (void)a.reshape({4}); }, "cannot become [4]");
}

TEST(Tensor, DataAsChecksTheElementType) {
  const Tensor a({2});
  EXPECT_NE(a.data_as<float>(), nullptr);
  EXPECT_THROW((void)a.data_as<std::int32_t>(), std::logic_error);
  const Tensor labels({2}, DType::i32);
  EXPECT_NE(labels.data_as<std::int32_t>(), nullptr);
  EXPECT_THROW((void)labels.f32(), std::logic_error);
}

TEST(Tensor, ToVectorConvertsHalfTypes) {
  const Tensor h({2}, DType::bf16);
  h.data_as<std::uint16_t>()[0] = bf16_from_float(1.5f);
  h.data_as<std::uint16_t>()[1] = bf16_from_float(-2.0f);
  EXPECT_EQ(h.to_vector(), (std::vector<float>{1.5f, -2.0f}));
  const Tensor copy = h.to(Device::cpu());
  EXPECT_NE(copy.data(), h.data());
  EXPECT_EQ(copy.to_vector(), h.to_vector());
}

TEST(Tensor, ToLayoutInterleavesAndBack) {
  // One item, 2 channels of 2 x 1 pixels: planes {1, 2} and {3, 4} interleave as 1 3 2 4.
  const Tensor planar = Tensor::from_values({1, 2, 2, 1}, {1, 2, 3, 4});
  const Tensor interleaved = to_layout(planar, TensorLayout::nhwc);
  EXPECT_EQ(interleaved.layout(), TensorLayout::nhwc);
  EXPECT_EQ(interleaved.shape(), planar.shape());
  EXPECT_EQ(interleaved.to_vector(), (std::vector<float>{1, 3, 2, 4}));
  EXPECT_EQ(to_layout(interleaved, TensorLayout::nchw).to_vector(), planar.to_vector());
  gpu::test::expect_throw_mentioning<std::invalid_argument>(
      [&] {
        (void)interleaved.reshape({1, 4});
      },
      "channels-last");
}

}  // namespace
}  // namespace stoke::nn
