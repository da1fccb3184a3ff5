// convert on the host stream (the CPU reference the GPU kernels are checked against): uint8 equal
// to nodes::Normalize bit for bit, NHWC as the transposition of NCHW, bf16 and f16 rounding, 1 to
// 16 channels, u16 / i16 / f32 input and its range, option and argument checks, converted_bytes; and
// the dtype helpers.
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
  EXPECT_EQ(element_size(DType::f16), 2u);
  EXPECT_EQ(to_string(DType::u8), "u8");
  EXPECT_EQ(to_string(DType::f32), "f32");
  EXPECT_EQ(to_string(DType::bf16), "bf16");
  EXPECT_EQ(to_string(DType::f16), "f16");
  EXPECT_EQ(element_size(DType::u16), 2u);
  EXPECT_EQ(element_size(DType::i16), 2u);
  EXPECT_EQ(to_string(DType::u16), "u16");
  EXPECT_EQ(to_string(DType::i16), "i16");
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
    const ConvertOptions options{.mean = {mean.begin(), mean.end()}, .stddev = {stddev.begin(), stddev.end()}};
    const std::vector<float> out = convert_on_host<float>(in, n, height, width, 3, options);
    const nodes::Normalize normalize({mean.begin(), mean.end()}, {stddev.begin(), stddev.end()});
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
  expect_nhwc_is_transposed_nchw<std::uint16_t>(DType::f16);
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

// Converts 16-bit or float pixels on the host into f32 and into f16 with the same options, and
// expects every f16 to be f16_from_float of the f32 (the rounding the CUDA kernels do too).
template <class In>
void expect_f16_is_f32_rounded(const std::vector<In>& in, DType src_dtype, std::size_t n, int height, int width,
                               int channels, ConvertOptions options) {
  options.dtype = DType::f32;
  std::vector<float> f32(in.size());
  convert(in.data(), src_dtype, f32.data(), n, height, width, channels, options, StreamView::host());
  options.dtype = DType::f16;
  std::vector<std::uint16_t> f16(in.size());
  convert(in.data(), src_dtype, f16.data(), n, height, width, channels, options, StreamView::host());
  int mismatches = 0;
  std::size_t first = f32.size();
  for (std::size_t i = 0; i < f32.size(); ++i) {
    if (f16[i] != f16_from_float(f32[i]) && mismatches++ == 0) first = i;
  }
  EXPECT_EQ(mismatches, 0) << to_string(src_dtype) << " -> f16 " << to_string(options.layout) << ", first at element "
                           << first;
}

TEST(Convert, F16IsTheF32ValueRoundedToNearestEven) {
  const std::size_t n = 2;
  const int height = 16;
  const int width = 16;
  const std::vector<std::uint8_t> u8 = random_bytes(n * height * width * 3, 4);
  std::vector<std::uint16_t> u16(u8.size());
  std::mt19937 rng(5);
  for (auto& v : u16) v = static_cast<std::uint16_t>(rng());
  for (TensorLayout layout : {TensorLayout::nchw, TensorLayout::nhwc}) {
    // uint8 by table lookup; 16-bit by the expression.
    expect_f16_is_f32_rounded(u8, DType::u8, n, height, width, 3, {.layout = layout});
    expect_f16_is_f32_rounded(u16, DType::u16, n, height, width, 3,
                              {.mean = {0.1f, 0.5f, 0.9f}, .stddev = {0.3f, 0.01f, 2.0f}, .layout = layout});
  }
  // The value itself, for one pixel: v = 255 in channel R is (1 - 0.485) / 0.229 = 2.248908...;
  // binary16 keeps 11 significant bits: 2.248046875 (0x407f), where bf16 has 2.25.
  const std::vector<std::uint8_t> white = {255, 255, 255};
  for (TensorLayout layout : {TensorLayout::nchw, TensorLayout::nhwc}) {
    const std::vector<std::uint16_t> out =
        convert_on_host<std::uint16_t>(white, 1, 1, 1, 3, {.dtype = DType::f16, .layout = layout});
    EXPECT_EQ(out[0], 0x407f) << to_string(layout);
    EXPECT_EQ(float_from_f16(out[0]), 2.248046875f) << to_string(layout);
  }
}

// Float pixels with mean 0, stddev 1 and range 1 come out as they went in, so the f16 output shows
// the rounding at binary16's edges: overflow to infinity, the largest finite value, subnormals and
// underflow to zero.
TEST(Convert, F16OverflowsToInfinityAndKeepsSubnormals) {
  const std::vector<float> in = {70000.0f, 65520.0f, 65519.0f, -65504.0f, 1e-6f,
                                 -3e-8f,   0x1p-25f, 0x1p-24f, 0.1f,      -0.1f};
  const std::vector<std::uint16_t> expected = {0x7c00, 0x7c00, 0x7bff, 0xfbff, 0x0011,
                                               0x8001, 0x0000, 0x0001, 0x2e66, 0xae66};
  for (TensorLayout layout : {TensorLayout::nchw, TensorLayout::nhwc}) {
    const ConvertOptions options{
        .mean = {0.0f}, .stddev = {1.0f}, .range = 1.0f, .dtype = DType::f16, .layout = layout};
    std::vector<std::uint16_t> out(in.size());
    // One channel: the same order in either layout.
    convert(in.data(), DType::f32, out.data(), 1, 2, 5, 1, options, StreamView::host());
    for (std::size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(out[i], expected[i]) << "element " << i << " (" << in[i] << "), " << to_string(layout);
      EXPECT_EQ(out[i], f16_from_float(in[i])) << "element " << i;
    }
  }
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

// One value stands for every channel; any channel count up to 16 (multispectral, RGBA, ...).
TEST(Convert, AnyChannelCountWithOneValueForAll) {
  const ConvertOptions options{.mean = {0.25f}, .stddev = {0.5f}, .layout = TensorLayout::nhwc};
  const int channels = 5;
  const std::vector<std::uint8_t> in = random_bytes(2 * 3 * 4 * channels, 7);
  const std::vector<float> out = convert_on_host<float>(in, 2, 3, 4, channels, options);
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(out[i], (static_cast<float>(in[i]) / 255.0f - 0.25f) / 0.5f) << "element " << i;

  const std::vector<std::uint8_t> sixteen = random_bytes(16, 8);  // one pixel of 16 channels
  std::vector<float> mean(16);
  std::vector<float> stddev(16);
  for (int c = 0; c < 16; ++c) {
    mean[static_cast<std::size_t>(c)] = 0.05f * static_cast<float>(c);
    stddev[static_cast<std::size_t>(c)] = 0.1f + 0.02f * static_cast<float>(c);
  }
  const std::vector<float> planes = convert_on_host<float>(sixteen, 1, 1, 1, 16, {.mean = mean, .stddev = stddev});
  for (std::size_t c = 0; c < 16; ++c)
    EXPECT_EQ(planes[c], (static_cast<float>(sixteen[c]) / 255.0f - mean[c]) / stddev[c]) << "channel " << c;
}

template <class In>
std::vector<float> convert_typed(const std::vector<In>& in, DType dtype, int height, int width, int channels,
                                 const ConvertOptions& options) {
  std::vector<float> out(in.size());
  convert(in.data(), dtype, out.data(), 1, height, width, channels, options, StreamView::host());
  return out;
}

// 16-bit and float pixels: divided by the type's full scale (or the range given), then normalized.
TEST(Convert, SixteenBitAndFloatInputFollowTheFormula) {
  const ConvertOptions options{.mean = {0.5f}, .stddev = {0.25f}, .layout = TensorLayout::nhwc};
  const std::vector<std::uint16_t> u16 = {0, 1, 4095, 32768, 65535, 12345};
  const std::vector<float> from_u16 = convert_typed(u16, DType::u16, 1, 2, 3, options);
  for (std::size_t i = 0; i < u16.size(); ++i)
    EXPECT_EQ(from_u16[i], (static_cast<float>(u16[i]) / 65535.0f - 0.5f) / 0.25f) << i;

  ConvertOptions twelve_bit = options;
  twelve_bit.range = 4095.0f;  // a 12-bit scanner's values stored in 16 bits
  const std::vector<float> from_12 = convert_typed(u16, DType::u16, 1, 2, 3, twelve_bit);
  EXPECT_EQ(from_12[2], (1.0f - 0.5f) / 0.25f);
  EXPECT_EQ(from_12[1], (1.0f / 4095.0f - 0.5f) / 0.25f);

  const std::vector<std::int16_t> i16 = {-32768, -1024, 0, 1, 1000, 32767};  // CT: Hounsfield units
  const std::vector<float> from_i16 = convert_typed(i16, DType::i16, 2, 3, 1, options);
  for (std::size_t i = 0; i < i16.size(); ++i)
    EXPECT_EQ(from_i16[i], (static_cast<float>(i16[i]) / 32767.0f - 0.5f) / 0.25f) << i;

  const std::vector<float> f32 = {-1.5f, 0.0f, 0.25f, 1.0f, 7.0f, 0.5f};
  const std::vector<float> from_f32 = convert_typed(f32, DType::f32, 3, 1, 2, options);
  for (std::size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(from_f32[i], (f32[i] - 0.5f) / 0.25f) << i;
}

// nodes::Normalize on the host and convert (on the host here, on a GPU in convert_gpu_test) are
// one step in two places: for every input type and channel count they agree bit for bit, so the
// step can move from the CPU's augmentations to the device without changing a value.
template <class In>
void expect_normalize_equals_convert(const cv::Mat& pixels, DType dtype, const std::vector<float>& mean,
                                     const std::vector<float>& stddev, float range) {
  const int channels = pixels.channels();
  std::vector<In> in(pixels.total() * static_cast<std::size_t>(channels));
  std::memcpy(in.data(), pixels.data, in.size() * sizeof(In));
  const std::vector<float> out =
      convert_typed(in, dtype, pixels.rows, pixels.cols, channels, {.mean = mean, .stddev = stddev, .range = range});
  nodes::Image image{.pixels = pixels.clone()};
  nodes::ItemRng rng(0, 0, 0);
  nodes::Normalize(mean, stddev, range)(image, rng);
  ASSERT_EQ(image.pixels.total(), out.size());
  EXPECT_EQ(std::memcmp(image.pixels.ptr<float>(), out.data(), out.size() * sizeof(float)), 0)
      << to_string(dtype) << " " << channels << " channels";
}

TEST(Convert, EveryInputTypeEqualsNormalizeBitForBit) {
  cv::RNG rng(3);
  cv::Mat u16(13, 11, CV_16UC(5));
  rng.fill(u16, cv::RNG::UNIFORM, 0, 65536);
  expect_normalize_equals_convert<std::uint16_t>(u16, DType::u16, {0.1f, 0.2f, 0.3f, 0.4f, 0.5f}, {0.25f}, 0);
  expect_normalize_equals_convert<std::uint16_t>(u16, DType::u16, {0.5f}, {0.2f}, 4095);
  cv::Mat hu(13, 11, CV_16SC1);
  rng.fill(hu, cv::RNG::UNIFORM, -1024, 3072);
  expect_normalize_equals_convert<std::int16_t>(hu, DType::i16, {40.0f}, {400.0f}, 1);  // Hounsfield units
  cv::Mat f32(13, 11, CV_32FC3);
  rng.fill(f32, cv::RNG::UNIFORM, -3, 3);
  expect_normalize_equals_convert<float>(f32, DType::f32, {0.1f, -0.2f, 0.3f}, {1.5f, 2.0f, 0.5f}, 0);
  cv::Mat grey(13, 11, CV_8UC1);
  rng.fill(grey, cv::RNG::UNIFORM, 0, 256);
  expect_normalize_equals_convert<std::uint8_t>(grey, DType::u8, {0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f},
                                                0);
}

// The uint8 table and the expression the other inputs compute agree bit for bit: the table is a
// cache of the expression, so every input type (and the GPU's element-wise kernel) agrees with
// nodes::Normalize on the same values.
TEST(Convert, TheUint8TableIsTheExpressionCached) {
  std::vector<std::uint8_t> bytes(256 * 3);
  std::vector<float> as_float(bytes.size());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::uint8_t>(i / 3);
    as_float[i] = static_cast<float>(bytes[i]);
  }
  const ConvertOptions options{.range = 255.0f};
  const std::vector<float> table = convert_typed(bytes, DType::u8, 16, 16, 3, options);
  const std::vector<float> expression = convert_typed(as_float, DType::f32, 16, 16, 3, options);
  EXPECT_EQ(std::memcmp(table.data(), expression.data(), table.size() * sizeof(float)), 0);
}

TEST(Convert, SixteenBitNhwcIsTheTranspositionOfNchw) {
  std::vector<std::uint16_t> in(2 * 3 * 5 * 4);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint16_t>(i * 997 % 65536);
  const ConvertOptions nchw{.mean = {0.1f, 0.2f, 0.3f, 0.4f}, .stddev = {0.5f}};
  ConvertOptions nhwc = nchw;
  nhwc.layout = TensorLayout::nhwc;
  std::vector<float> a(in.size());
  std::vector<float> b(in.size());
  convert(in.data(), DType::u16, a.data(), 2, 3, 5, 4, nchw, StreamView::host());
  convert(in.data(), DType::u16, b.data(), 2, 3, 5, 4, nhwc, StreamView::host());
  for (std::size_t item = 0; item < 2; ++item)
    for (std::size_t p = 0; p < 15; ++p)
      for (std::size_t c = 0; c < 4; ++c)
        ASSERT_EQ(a[item * 60 + c * 15 + p], b[(item * 15 + p) * 4 + c]) << item << " " << p << " " << c;
}

TEST(Convert, InputTypesItCannotTakeAreRefused) {
  std::vector<std::int32_t> in(3);
  std::vector<float> out(3);
  expect_throw_mentioning<std::invalid_argument>(
      [&] { convert(in.data(), DType::i32, out.data(), 1, 1, 1, 3, ConvertOptions{}, StreamView::host()); },
      "the input must be u8, u16, i16 or f32 pixels, got i32");
  std::vector<std::uint16_t> u16(4);
  expect_throw_mentioning<std::invalid_argument>(
      [&] {
        convert(reinterpret_cast<std::byte*>(u16.data()) + 1, DType::u16, out.data(), 1, 1, 1, 1, {.mean = {0.0f}},
                StreamView::host());
      },
      "src must be aligned to its element type (2 bytes for u16)");
}

TEST(Convert, NoImagesDoesNothing) {
  EXPECT_NO_THROW(convert_u8(nullptr, nullptr, 0, 224, 224, 3, ConvertOptions{}, StreamView::host()));
}

TEST(ConvertOptions, BadOptionsThrowNamingTheField) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_NO_THROW(ConvertOptions{}.validate());
  EXPECT_NO_THROW(ConvertOptions{.dtype = DType::bf16}.validate());
  EXPECT_NO_THROW(ConvertOptions{.dtype = DType::f16}.validate());
  EXPECT_NO_THROW((ConvertOptions{.dtype = DType::f16, .layout = TensorLayout::nhwc}.validate()));
  const auto expect_invalid = [](const ConvertOptions& options, const std::string& fragment) {
    expect_throw_mentioning<std::invalid_argument>([&] { options.validate(); }, fragment);
  };
  expect_invalid({.mean = {0.5f, nan, 0.5f}}, "mean[1] must be finite");
  expect_invalid({.mean = {inf, 0.5f, 0.5f}}, "mean[0]");
  expect_invalid({.stddev = {0.5f, 0.5f, 0.0f}}, "stddev[2] must be finite and > 0");
  expect_invalid({.stddev = {-1.0f, 0.5f, 0.5f}}, "stddev[0]");
  expect_invalid({.stddev = {0.5f, inf, 0.5f}}, "stddev[1]");
  expect_invalid({.stddev = {0.5f, 0.5f, nan}}, "stddev[2]");
  expect_invalid({.mean = {}}, "mean must hold 1 to 16 values");
  expect_invalid({.stddev = std::vector<float>(17, 1.0f)}, "stddev must hold 1 to 16 values");
  expect_invalid({.range = -1.0f}, "range must be finite and >= 0");
  expect_invalid({.range = inf}, "range");
  expect_invalid({.dtype = DType::u8}, "dtype must be f32, bf16 or f16, got u8");
  expect_invalid({.dtype = DType::i32}, "dtype must be f32, bf16 or f16, got i32");
  expect_invalid({.dtype = DType::u16}, "dtype must be f32, bf16 or f16, got u16");
}

TEST(Convert, BadArgumentsThrowNamingThem) {
  std::vector<std::uint8_t> in(4 * 4 * 4);
  std::vector<float> out(4 * 4 * 4);
  const auto call = [&](const std::uint8_t* src, void* dst, int height, int width, int channels,
                        ConvertOptions options = {}) {
    convert_u8(src, dst, 1, height, width, channels, options, StreamView::host());
  };
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 1, 1, 17); },
                                                 "channels must be 1 to 16, got 17");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 2, 2, 4); },
                                                 "mean has 3 values for images of 4 channels");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 2, 2, 0); }, "channels");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 0, 2, 3); },
                                                 "height and width must be positive");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 2, -1, 3); }, "2x-1");
  expect_throw_mentioning<std::invalid_argument>([&] { call(nullptr, out.data(), 2, 2, 3); }, "src is null");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), nullptr, 2, 2, 3); }, "dst is null");
  expect_throw_mentioning<std::invalid_argument>(
      [&] { call(in.data(), reinterpret_cast<std::byte*>(out.data()) + 2, 2, 2, 3); },
      "dst must be aligned to its element type (4 bytes for f32)");
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 2, 2, 3, {.dtype = DType::i32}); },
                                                 "dtype must be f32, bf16 or f16, got i32");
  const ConvertOptions bad_stddev{.stddev = {1, 1, 0}};
  expect_throw_mentioning<std::invalid_argument>([&] { call(in.data(), out.data(), 2, 2, 3, bad_stddev); },
                                                 "stddev[2]");
}

TEST(Convert, ConvertedBytes) {
  EXPECT_EQ(converted_bytes(2, 3, 4, 3, DType::f32), 2u * 3 * 4 * 3 * 4);
  EXPECT_EQ(converted_bytes(2, 3, 4, 3, DType::bf16), 2u * 3 * 4 * 3 * 2);
  EXPECT_EQ(converted_bytes(2, 3, 4, 3, DType::f16), 2u * 3 * 4 * 3 * 2);
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
