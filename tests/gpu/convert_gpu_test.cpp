// convert on a CUDA stream against the CPU reference (convert on the host stream, itself checked
// against nodes::Normalize by convert_test): every dtype x layout, the uint8 table kernels
// (vectorized and scalar: odd sizes with tails, unaligned pointers), the element-wise kernel (u16,
// i16 and f32 input, 4 to 16 channels), f16 at binary16's edges (overflow to infinity,
// subnormals), a full 64 x 224 x 224 batch, and two streams converting with different options at
// once. Nothing outside the output may be written. bf16 and f16 must match the host bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <stoke/gpu/convert.hpp>
#include <stoke/gpu/device.hpp>
#include <stoke/gpu/memory.hpp>
#include <stoke/gpu/stream.hpp>
#include <string>
#include <vector>

namespace stoke::gpu {
namespace {

struct Shape {
  std::size_t n;
  int height;
  int width;
  int channels;
  DType input = DType::u8;
};

std::string describe(const Shape& shape, const ConvertOptions& options) {
  return std::to_string(shape.n) + "x" + std::to_string(shape.height) + "x" + std::to_string(shape.width) + "x" +
         std::to_string(shape.channels) + " " + std::string(to_string(shape.input)) + " -> " + std::string(to_string(options.dtype)) + " " +
         std::string(to_string(options.layout));
}

std::vector<std::uint8_t> random_bytes(std::size_t count, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::uint8_t> bytes(count);
  for (auto& b : bytes) b = static_cast<std::uint8_t>(byte(rng));
  return bytes;
}

std::size_t input_bytes(const Shape& shape) {
  return converted_bytes(shape.n, shape.height, shape.width, shape.channels, shape.input);
}

// Random pixels of the shape's input type, as bytes: any bit pattern of the integer types; for
// f32, finite values around the 0..1 scale (a NaN's payload is not what is under test).
std::vector<std::uint8_t> random_input(const Shape& shape, std::uint32_t seed) {
  if (shape.input != DType::f32) return random_bytes(input_bytes(shape), seed);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-2.0f, 3.0f);
  std::vector<std::uint8_t> bytes(input_bytes(shape));
  for (std::size_t i = 0; i < bytes.size(); i += sizeof(float)) {
    const float v = value(rng);
    std::memcpy(bytes.data() + i, &v, sizeof(float));
  }
  return bytes;
}
std::size_t output_bytes(const Shape& shape, const ConvertOptions& options) {
  return converted_bytes(shape.n, shape.height, shape.width, shape.channels, options.dtype);
}

std::vector<std::byte> convert_on_host(const std::vector<std::uint8_t>& in, const Shape& shape,
                                       const ConvertOptions& options) {
  // float-sized elements: aligned for either dtype.
  std::vector<float> out((output_bytes(shape, options) + sizeof(float) - 1) / sizeof(float));
  convert(in.data(), shape.input, out.data(), shape.n, shape.height, shape.width, shape.channels, options,
          StreamView::host());
  std::vector<std::byte> bytes(output_bytes(shape, options));
  std::memcpy(bytes.data(), out.data(), bytes.size());
  return bytes;
}

constexpr std::size_t guard_bytes = 256;  // around the output, must keep the fill value
constexpr int fill_value = 0xa5;

// A conversion enqueued on a stream: the device buffers and, once finished, the output.
class DeviceConversion {
 public:
  /// Copies `in` to the device at `src_offset` bytes into a buffer and enqueues the conversion
  /// into another at `dst_offset` bytes after a guard region, all on `stream`; returns at once.
  DeviceConversion(const std::vector<std::uint8_t>& in, const Shape& shape, const ConvertOptions& options,
                   const Stream& stream, std::size_t src_offset = 0, std::size_t dst_offset = 0)
      : shape_(shape),
        options_(options),
        dst_offset_(guard_bytes + dst_offset),
        src_(stream.device(), src_offset + in.size()),
        dst_(stream.device(), dst_offset_ + output_bytes(shape, options) + guard_bytes),
        stream_(&stream) {
    std::byte* src = src_.as<std::byte>() + src_offset;
    copy_async(src, in.data(), in.size(), stream);
    fill_async(dst_.data(), fill_value, dst_.size(), stream);
    convert(src, shape.input, dst_.as<std::byte>() + dst_offset_, shape.n, shape.height, shape.width, shape.channels,
            options, stream);
  }

  /// Waits for the stream, checks the guard regions and returns the output.
  std::vector<std::byte> result() const {
    std::vector<std::byte> all(dst_.size());
    copy_async(all.data(), dst_.data(), all.size(), *stream_);
    stream_->synchronize();
    const std::size_t end = dst_offset_ + output_bytes(shape_, options_);
    std::size_t touched = 0;
    for (std::size_t i = 0; i < all.size(); ++i) {
      if ((i < dst_offset_ || i >= end) && all[i] != static_cast<std::byte>(fill_value)) ++touched;
    }
    EXPECT_EQ(touched, 0u) << "bytes written outside the output, " << describe(shape_, options_);
    return {all.begin() + static_cast<std::ptrdiff_t>(dst_offset_), all.begin() + static_cast<std::ptrdiff_t>(end)};
  }

 private:
  Shape shape_;
  ConvertOptions options_;
  std::size_t dst_offset_;
  DeviceBuffer src_;
  DeviceBuffer dst_;
  const Stream* stream_;
};

// Distance in units in the last place between two finite floats of any signs.
std::uint64_t ulp_distance(float a, float b) {
  const auto ordered = [](float value) {
    const auto bits = std::bit_cast<std::int32_t>(value);
    return bits < 0 ? -static_cast<std::int64_t>(bits & 0x7fffffff) : static_cast<std::int64_t>(bits);
  };
  const std::int64_t d = ordered(a) - ordered(b);
  return static_cast<std::uint64_t>(d < 0 ? -d : d);
}

void expect_same(const std::vector<std::byte>& device, const std::vector<std::byte>& host, const Shape& shape,
                 const ConvertOptions& options) {
  ASSERT_EQ(device.size(), host.size()) << describe(shape, options);
  if (options.dtype == DType::f32) {
    const std::size_t count = host.size() / sizeof(float);
    std::uint64_t max_ulp = 0;
    std::size_t differing = 0;
    std::size_t first = count;
    for (std::size_t i = 0; i < count; ++i) {
      float d = 0;
      float h = 0;
      std::memcpy(&d, device.data() + i * sizeof(float), sizeof(float));
      std::memcpy(&h, host.data() + i * sizeof(float), sizeof(float));
      const std::uint64_t ulp = ulp_distance(d, h);
      if (ulp != 0 && first == count) first = i;
      differing += ulp != 0 ? 1 : 0;
      max_ulp = std::max(max_ulp, ulp);
    }
    EXPECT_LE(max_ulp, 1u) << describe(shape, options) << ": first difference at element " << first;
    // The table holds what the host computes, and the element-wise kernel computes the same
    // expression with IEEE division: no rounding difference at all.
    EXPECT_EQ(differing, 0u) << describe(shape, options) << ": max " << max_ulp << " ulp, first at element " << first;
  } else {
    std::size_t differing = 0;
    std::size_t first = host.size() / 2;
    for (std::size_t i = 0; i < host.size() / 2; ++i) {
      const bool same = std::memcmp(device.data() + 2 * i, host.data() + 2 * i, 2) == 0;
      if (!same && differing++ == 0) first = i;
    }
    EXPECT_EQ(differing, 0u) << describe(shape, options) << ": first difference at element " << first;
  }
}

class ConvertGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
    stream_.emplace(device_);  // a non-blocking stream of its own, never the default one
  }

  static std::vector<ConvertOptions> every_dtype_and_layout(ConvertOptions base = {}) {
    std::vector<ConvertOptions> all;
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (TensorLayout layout : {TensorLayout::nchw, TensorLayout::nhwc}) {
        base.dtype = dtype;
        base.layout = layout;
        all.push_back(base);
      }
    }
    return all;
  }

  void check(const Shape& shape, const ConvertOptions& options, std::uint32_t seed, std::size_t src_offset = 0,
             std::size_t dst_offset = 0) {
    const std::vector<std::uint8_t> in = random_input(shape, seed);
    const DeviceConversion conversion(in, shape, options, *stream_, src_offset, dst_offset);
    expect_same(conversion.result(), convert_on_host(in, shape, options), shape, options);
  }

  Device device_ = Device::cuda(0);
  std::optional<Stream> stream_;
};

TEST_F(ConvertGpu, SmallAndOddShapesMatchTheCpuReference) {
  const Shape shapes[] = {
      {3, 7, 5, 3},      // 315 elements: NHWC vector groups + a 3-element tail; NCHW planes of 35 (scalar)
      {3, 4, 5, 3},      // NCHW planes of 20 pixels: the NCHW vector kernel
      {1, 1, 1, 3},      // fewer than 4 elements: only the tail
      {2, 3, 3, 1},      // grayscale, odd
      {2, 4, 4, 1},      // grayscale, planes of 16
      {2, 3, 3, 2},      // two channels, odd
      {2, 2, 2, 2},      // two channels, planes of 4
      {5, 32, 32, 3},    // CIFAR-sized
      {2, 300, 301, 3},  // several tiles per block
  };
  std::uint32_t seed = 1;
  const ConvertOptions custom{.mean = {0.1f, 0.9f, -0.5f}, .stddev = {0.07f, 2.0f, 0.5f}};
  for (const ConvertOptions& options : every_dtype_and_layout()) {
    for (const Shape& shape : shapes) check(shape, options, seed++);
  }
  for (const ConvertOptions& options : every_dtype_and_layout(custom)) check(shapes[0], options, seed++);
}

TEST_F(ConvertGpu, OtherInputsAndChannelCountsMatchTheCpuReference) {
  const Shape shapes[] = {
      {3, 7, 5, 4},                 // RGBA-like uint8: past the table kernels' 3 channels
      {2, 4, 4, 16},                // the most channels
      {3, 7, 5, 3, DType::u16},     // 16-bit, odd
      {2, 32, 32, 1, DType::u16},   // 16-bit grayscale
      {2, 9, 11, 1, DType::i16},    // signed 16-bit (CT)
      {2, 8, 8, 5, DType::f32},     // float, 5 channels
      {2, 300, 301, 3, DType::u16}  // several blocks per SM
  };
  std::uint32_t seed = 400;
  ConvertOptions many{.mean = {}, .stddev = {}, .range = 0};
  for (int c = 0; c < 16; ++c) {
    many.mean.push_back(0.05f * static_cast<float>(c) - 0.2f);
    many.stddev.push_back(0.1f + 0.07f * static_cast<float>(c));
  }
  for (const ConvertOptions& options : every_dtype_and_layout(many)) {
    for (const Shape& shape : shapes) check(shape, options, seed++);
  }
  ConvertOptions twelve_bit{.mean = {0.5f}, .stddev = {0.25f}, .range = 4095.0f};
  for (const ConvertOptions& options : every_dtype_and_layout(twelve_bit)) check(shapes[3], options, seed++);
}

// f16 has a narrow range: a tiny stddev sends values past its largest finite 65504 (to infinity),
// a huge one into subnormals and to zero. The table kernels (uint8, vector and
// scalar) and the element-wise kernel (f32 input) must round them as the host does.
TEST_F(ConvertGpu, F16OverflowAndSubnormalsMatchTheCpuReference) {
  const Shape shapes[] = {
      {3, 7, 5, 3},              // NHWC vector + tail; NCHW scalar
      {3, 4, 8, 3},              // NCHW vector
      {2, 9, 11, 1, DType::f32}  // element-wise
  };
  std::uint32_t seed = 500;
  for (float stddev : {1e-5f, 3e-3f, 1e5f}) {
    for (TensorLayout layout : {TensorLayout::nchw, TensorLayout::nhwc}) {
      const ConvertOptions options{.mean = {0.0f}, .stddev = {stddev}, .dtype = DType::f16, .layout = layout};
      for (const Shape& shape : shapes) {
        check(shape, options, seed++);
        // dst off 8-byte alignment (and uint8 src off 4-byte alignment): the scalar table kernels.
        check(shape, options, seed++, element_size(shape.input), element_size(DType::f16));
      }
    }
  }
}

TEST_F(ConvertGpu, UnalignedPointersTakeTheScalarPathWithTheSameResults) {
  std::uint32_t seed = 100;
  for (const ConvertOptions& options : every_dtype_and_layout()) {
    const std::size_t element = element_size(options.dtype);
    for (const Shape& shape : {Shape{3, 7, 5, 3}, Shape{3, 4, 8, 3}}) {
      check(shape, options, seed++, 1, 0);        // src not 4-byte aligned
      check(shape, options, seed++, 0, element);  // dst aligned to its element only
      check(shape, options, seed++, 3, element);
    }
  }
}

TEST_F(ConvertGpu, AFullImageNetBatchMatchesTheCpuReference) {
  const Shape shape{64, 224, 224, 3};
  std::uint32_t seed = 200;
  for (const ConvertOptions& options : every_dtype_and_layout()) check(shape, options, seed++);
}

TEST_F(ConvertGpu, StreamsConvertWithDifferentOptionsAtOnce) {
  // Each launch carries its own table: two conversions in flight on two streams must not mix.
  const Shape shape{16, 224, 224, 3};
  const std::vector<std::uint8_t> in = random_bytes(input_bytes(shape), 300);
  const ConvertOptions first{.dtype = DType::f32, .layout = TensorLayout::nchw};
  const ConvertOptions second{
      .mean = {0.5f, 0.5f, 0.5f}, .stddev = {0.25f, 0.25f, 0.25f}, .dtype = DType::bf16, .layout = TensorLayout::nhwc};
  const ConvertOptions third{
      .mean = {0.4f, 0.5f, 0.6f}, .stddev = {0.2f, 0.3f, 0.4f}, .dtype = DType::f16, .layout = TensorLayout::nhwc};
  const Stream other(device_);
  const DeviceConversion a(in, shape, first, *stream_);
  const DeviceConversion b(in, shape, second, other);
  const DeviceConversion c(in, shape, second, *stream_);
  const DeviceConversion d(in, shape, first, other);
  const DeviceConversion e(in, shape, third, *stream_);
  const DeviceConversion f(in, shape, third, other);
  const std::vector<std::byte> expected_first = convert_on_host(in, shape, first);
  const std::vector<std::byte> expected_second = convert_on_host(in, shape, second);
  const std::vector<std::byte> expected_third = convert_on_host(in, shape, third);
  expect_same(a.result(), expected_first, shape, first);
  expect_same(b.result(), expected_second, shape, second);
  expect_same(c.result(), expected_second, shape, second);
  expect_same(d.result(), expected_first, shape, first);
  expect_same(e.result(), expected_third, shape, third);
  expect_same(f.result(), expected_third, shape, third);
}

}  // namespace
}  // namespace stoke::gpu
