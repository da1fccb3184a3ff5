// convert_u8 on the host stream (the CPU reference the GPU kernel is checked against): equal to
// nodes::Normalize bit for bit, NHWC as the transposition of NCHW, bf16 rounding, 1- and 2-channel
// input, option and argument checks, converted_bytes; and the dtype helpers.
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <opencv2/core.hpp>
#include <random>
#include <stdexcept>
#include <stoke/gpu/convert.hpp>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/dtype.hpp>
#include <stoke/gpu/error.hpp>
#include <stoke/nodes/normalize.hpp>
#include <string>
#include <vector>

#include "expect_throw.hpp"

namespace stoke::gpu {
namespace {

std::vector<std::uint8_t> random_bytes(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::uint8_t> bytes(count);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(byte(rng));
  return bytes;
}

template <class Out>
std::vector<Out> convert_on_host(const std::vector<std::uint8_t>& in, std::size_t n, int height, int width,
                                 int channels, const ConvertOptions& options) {
  std::vector<Out> out(converted_bytes(n, height, width, channels, options.dtype) / sizeof(Out));
  convert_u8(in.data(), out.data(), n, height, width, channels, options, StreamView::host());
  return out;
}

using stoke::gpu::test::expect_throw_mentioning;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(element_size(DType::u8), 1u);
  EXPECT_EQ(element_size(DType::f32), 4u);
  EXPECT_EQ(element_size(DType::bf16), 2u);
  EXPECT_EQ(to_string(DType::u8), "u8");
  EXPECT_EQ(to_string(DType::f32), "f32");
  EXPECT_EQ(to_string(DType::bf16), "bf16");
  EXPECT_EQ(to_string(TensorLayout::nchw), "nchw");
  EXPECT_EQ(to_string(TensorLayout::nhwc), "nhwc");
}

TEST(DType, Bf16RoundsToNearestTiesToEven) {
  // 1 + 2^-8 lies half-way between 1.0 (0x3f80) and 1 + 2^-7 (0x3f81): the even one, 1.0, wins.
  EXPECT_EQ(bf16_from_float(1.00390625f), 0x3f80);
  EXPECT_EQ(float_from_bf16(bf16_from_float(1.00390625f)), 1.0f);
  // 1 + 3 * 2^-8 lies half-way between 0x3f81 and 0x3f82 (1.015625): the even one wins, upwards.
  EXPECT_EQ(bf16_from_float(1.01171875f), 0x3f82);
  EXPECT_EQ(float_from_bf16(bf16_from_float(1.01171875f)), 1.015625f);
  // Not a tie: nearest.
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3f808001u)), 0x3f81);  // just above 1 + 2^-8
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x3f807fffu)), 0x3f80);  // just below it
  EXPECT_EQ(bf16_from_float(-1.01171875f), 0xbf82);
  EXPECT_EQ(bf16_from_float(0.0f), 0x0000);
  EXPECT_EQ(bf16_from_float(-0.0f), 0x8000);
  // Exact values are kept.
  EXPECT_EQ(bf16_from_float(-2.5f), 0xc020);
  // Overflow rounds to infinity; infinities and NaN (CUDA's canonical NaN).
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bf16_from_float(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(bf16_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7fff);
  // Subnormals: a tie at the bottom goes to the even 0, the next one up to 2.
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x00008000u)), 0x0000);
  EXPECT_EQ(bf16_from_float(std::bit_cast<float>(0x00018000u)), 0x0002);
}

TEST(Convert, F32NchwEqualsNormalizeBitForBit) {
  const int height = 29;
  const int width = 37;
  const std::size_t n = 4;
  const std::vector<std::uint8_t> in = random_bytes(n * height * width * 3, 1);
  for (const auto& [mean, stddev] :
       {std::pair{nodes::Normalize::imagenet_mean, nodes::Normalize::imagenet_std},
        std::pair{std::array<float, 3>{0.5f, 0.5f, 0.5f}, std::array<float, 3>{0.5f, 0.5f, 0.5f}},
        std::pair{std::array<float, 3>{-0.3f, 0.0f, 1.7f}, std::array<float, 3>{0.01f, 3.0f, 0.333f}}}) {
    const ConvertOptions options{.mean = mean, .stddev = stddev};
    const std::vector<float> out = convert_on_host<float>(in, n, height, width, 3, options);
    const nodes::Normalize normalize(mean, stddev);
    for (std::size_t item = 0; item < n; ++item) {
      // nodes::Normalize on the same pixels as an image: float CHW, (3 * height) x width.
      cv::Mat pixels(height, width, CV_8UC3, const_cast<std::uint8_t*>(in.data() + item * height * width * 3));
      nodes::Image image{.pixels = pixels.clone(), .name = {}};
      nodes::ItemRng rng(0, 0, item);
      normalize(image, rng);
      ASSERT_TRUE(image.pixels.isContinuous());
      ASSERT_EQ(image.pixels.total(), static_cast<std::size_t>(3 * height * width));
      EXPECT_EQ(std::memcmp(image.pixels.ptr<float>(), out.data() + item * 3 * height * width,
                            sizeof(float) * 3 * height * width),
                0)
          << "item " << item << ", mean " << mean[0] << "," << mean[1] << "," << mean[2];
    }
  }
}

TEST(Convert, F32SpotValuesFollowTheFormula) {
  const std::vector<std::uint8_t> in = {0, 128, 255, 17, 200, 3};  // 2 pixels, 1 x 2 image
  const std::vector<float> out = convert_on_host<float>(in, 1, 1, 2, 3, ConvertOptions{});
  // NCHW: plane R = pixels 0, 1; plane G; plane B.
  EXPECT_EQ(out[0], (0.0f / 255.0f - 0.485f) / 0.229f);
  EXPECT_EQ(out[1], (17.0f / 255.0f - 0.485f) / 0.229f);
  EXPECT_EQ(out[2], (128.0f / 255.0f - 0.456f) / 0.224f);
  EXPECT_EQ(out[3], (200.0f / 255.0f - 0.456f) / 0.224f);
  EXPECT_EQ(out[4], (255.0f / 255.0f - 0.406f) / 0.225f);
  EXPECT_EQ(out[5], (3.0f / 255.0f - 0.406f) / 0.225f);
}

template <class Out>
void expect_nhwc_is_transposed_nchw(DType dtype) {
  const std::size_t n = 3;
  const int height = 7;
  const int width = 5;
  const int channels = 3;
  const std::vector<std::uint8_t> in = random_bytes(n * height * width * channels, 2);
  const std::vector<Out> nchw =
      convert_on_host<Out>(in, n, height, width, channels, {.dtype = dtype, .layout = TensorLayout::nchw});
  const std::vector<Out> nhwc =
      convert_on_host<Out>(in, n, height, width, channels, {.dtype = dtype, .layout = TensorLayout::nhwc});
  ASSERT_EQ(nchw.size(), nhwc.size());
  const std::size_t pixels = static_cast<std::size_t>(height) * width;
  int mismatches = 0;
  for (std::size_t item = 0; item < n; ++item) {
    for (std::size_t p = 0; p < pixels; ++p) {
      for (std::size_t c = 0; c < static_cast<std::size_t>(channels); ++c) {
        const Out a = nhwc[(item * pixels + p) * channels + c];
        const Out b = nchw[item * pixels * channels + c * pixels + p];
        mismatches += std::memcmp(&a, &b, sizeof(Out)) != 0 ? 1 : 0;
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(Convert, NhwcIsTheTranspositionOfNchw) {
  expect_nhwc_is_transposed_nchw<float>(DType::f32);
  expect_nhwc_is_transposed_nchw<std::uint16_t>(DType::bf16);
}

TEST(Convert, Bf16IsTheF32ValueRoundedToNearestEven) {
  const std::size_t n = 2;
  const int height = 16;
  const int width = 16;  // 512 pixels: every byte value in every channel, most likely
  const std::vector<std::uint8_t> in = random_bytes(n * height * width * 3, 3);
  for (TensorLayout layout : {TensorLayout::nchw, TensorLayout::nhwc}) {
    const std::vector<float> f32 = convert_on_host<float>(in, n, height, width, 3, {.layout = layout});
    const std::vector<std::uint16_t> bf16 =
        convert_on_host<std::uint16_t>(in, n, height, width, 3, {.dtype = DType::bf16, .layout = layout});
    ASSERT_EQ(f32.size(), bf16.size());
    int mismatches = 0;
    for (std::size_t i = 0; i < f32.size(); ++i) mismatches += bf16[i] != bf16_from_float(f32[i]) ? 1 : 0;
    EXPECT_EQ(mismatches, 0) << to_string(layout);
  }
  // The value itself, for one pixel: v = 255 in channel R is (1 - 0.485) / 0.229 = 2.2489...;
  // bfloat16 keeps 8 significant bits: 2.25.
  const std::vector<std::uint8_t> white = {255, 255, 255};
  const std::vector<std::uint16_t> out = convert_on_host<std::uint16_t>(white, 1, 1, 1, 3, {.dtype = DType::bf16});
  EXPECT_EQ(float_from_bf16(out[0]), 2.25f);
}

TEST(Convert, OneAndTwoChannelsUseTheFirstMeansAndStds) {
  const ConvertOptions options{.mean = {0.1f, 0.2f, 0.3f}, .stddev = {0.4f, 0.5f, 0.6f}};
  const std::vector<std::uint8_t> gray = {0, 10, 250, 255};  // 2 x 2, one channel
  const std::vector<float> one = convert_on_host<float>(gray, 1, 2, 2, 1, options);
  ASSERT_EQ(one.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(one[i], (static_cast<float>(gray[i]) / 255.0f - 0.1f) / 0.4f);

  const std::vector<std::uint8_t> pairs = {1, 2, 3, 4};  // 1 x 2, two channels
  const std::vector<float> two = convert_on_host<float>(pairs, 1, 1, 2, 2, options);
  ASSERT_EQ(two.size(), 4u);
  EXPECT_EQ(two[0], (1.0f / 255.0f - 0.1f) / 0.4f);  // plane 0: pixels 0, 1
  EXPECT_EQ(two[1], (3.0f / 255.0f - 0.1f) / 0.4f);
  EXPECT_EQ(two[2], (2.0f / 255.0f - 0.2f) / 0.5f);  // plane 1
  EXPECT_EQ(two[3], (4.0f / 255.0f - 0.2f) / 0.5f);
}

TEST(Convert, NoImagesDoesNothing) {
  EXPECT_NO_THROW(convert_u8(nullptr, nullptr, 0, 224, 224, 3, ConvertOptions{}, StreamView::host()));
}

TEST(ConvertOptions, BadOptionsThrowNamingTheField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_NO_THROW(ConvertOptions{}.validate());
  EXPECT_NO_THROW(ConvertOptions{.dtype = DType::bf16}.validate());
  const auto expect_invalid = [](const ConvertOptions& options, const std::string& fragment) {
    expect_throw_mentioning<std::invalid_argument>([&] { options.validate(); }, fragment);
  };
  expect_invalid({.mean = {0.5f, nan, 0.5f}}, "mean[1] (G) must be finite");
  expect_invalid({.mean = {inf, 0.5f, 0.5f}}, "mean[0] (R)");
  expect_invalid({.stddev = {0.5f, 0.5f, 0.0f}}, "stddev[2] (B) must be finite and > 0");
  expect_invalid({.stddev = {-1.0f, 0.5f, 0.5f}}, "stddev[0]");
  expect_invalid({.stddev = {0.5f, inf, 0.5f}}, "stddev[1]");
  expect_invalid({.stddev = {0.5f, 0.5f, nan}}, "stddev[2]");
  expect_invalid({.dtype = DType::u8}, "dtype must be f32 or bf16, got u8");
  expect_invalid({.dtype = DType::f16}, "dtype must be f32 or bf16, got f16");  // no f16 kernel
}

TEST(Convert, BadArgumentsThrowNamingThem) {
  std::vector<std::uint8_t> in(4 * 4 * 4);
  std::vector<float> out(4 * 4 * 4);
  const auto call = [&](const std::uint8_t* src, void* dst, int height, int width, int channels,
                        ConvertOptions options = {}) {
    convert_u8(src, dst, 1, height, width, channels, options, StreamView::host());
  };
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 2, 2, 4); },
                                                 "channels must be 1, 2 or 3");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 2, 2, 0); }, "channels");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 0, 2, 3); },
                                                 "height and width must be positive");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 2, -1, 3); }, "2x-1");
  expect_throw_mentioning<std::invalid_argument>([&] { call(nullptr, out.data(), 2, 2, 3); }, "src is null");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), nullptr, 2, 2, 3); }, "dst is null");
  expect_throw_mentioning<std::invalid_argument>(
      [&] { call(in.data(), reinterpret_cast<std::byte*>(out.data()) + 2, 2, 2, 3); },
      "dst must be aligned to its element type (4 bytes for f32)");
  const ConvertOptions bad_stddev{.stddev = {1, 1, 0}};
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 2, 2, 3, bad_stddev); },
                                                 "stddev[2]");
}

TEST(Convert, ConvertedBytes) {
  EXPECT_EQ(converted_bytes(2, 3, 4, 3, DType::f32), 2u * 3 * 4 * 3 * 4);
  EXPECT_EQ(converted_bytes(2, 3, 4, 3, DType::bf16), 2u * 3 * 4 * 3 * 2);
  EXPECT_EQ(converted_bytes(2, 3, 4, 3, DType::u8), 2u * 3 * 4 * 3);
  EXPECT_EQ(converted_bytes(64, 224, 224, 3, DType::f32), 38'535'168u);
  EXPECT_EQ(converted_bytes(0, 224, 224, 3, DType::f32), 0u);
  EXPECT_THROW((void)converted_bytes(1, -1, 4, 3, DType::f32), std::invalid_argument);
  EXPECT_THROW((void)converted_bytes(std::numeric_limits<std::size_t>::max() / 2, 2, 2, 3, DType::f32),
               std::overflow_error);
}

TEST(Convert, ACudaStreamViewWithoutAStreamIsRefused) {
  std::vector<std::uint8_t> in(3);
  std::vector<float> out(3);
  // A CUDA view with a null cudaStream_t would be CUDA's legacy default stream, which stoke never
  // uses; in a build without CUDA, no CUDA stream can be used at all.
  const StreamView cuda_stream(Device::cuda(0), nullptr);
#if STOKE_HAS_CUDA
  const std::string fragment = "legacy default stream";
#else
  const std::string fragment = "built without CUDA";
#endif
  expect_throw_mentioning<DeviceError>(
      [&] { convert_u8(in.data(), out.data(), 1, 1, 1, 3, ConvertOptions{}, cuda_stream); }, fragment);
}

}  // namespace
}  // namespace stoke::gpu
