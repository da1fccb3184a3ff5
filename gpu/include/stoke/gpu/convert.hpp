// convert: decoded pixels (uint8, uint16, int16 or float NHWC, any channel count) -> normalized
// f32, bf16 or f16, NCHW or NHWC. The device-side counterpart of nodes::Normalize: batches cross to
// the device as they were decoded (uint8: 4x fewer bytes than float) and a kernel on the compute
// stream converts them there, in one pass (a half-precision channels-last run asks for f16 NHWC).
//
//   stoke::gpu::ConvertOptions options{.dtype = stoke::gpu::DType::bf16};
//   stoke::gpu::DeviceBuffer out(device, stoke::gpu::converted_bytes(n, 224, 224, 3, options.dtype));
//   stoke::gpu::convert(in.data(), stoke::gpu::DType::u8, out.data(), n, 224, 224, 3, options, compute);
//   // enqueued on `compute`; `in` must stay valid until the stream has run it
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stoke/gpu/dtype.hpp"
#include "stoke/gpu/stream.hpp"
#include "stoke/nodes/normalize.hpp"

namespace stoke::gpu {

/// The most channels a converted image may have.
inline constexpr int max_convert_channels = 16;

/// What convert computes: out = (in / range - mean[c]) / stddev[c] in float, stored as `dtype` in
/// `layout`. The defaults are nodes::Normalize's (ImageNet's mean and std, float CHW).
struct ConvertOptions {
  /// Per channel, on the 0..1 scale (after the division by `range`): one value per channel, or a
  /// single value for every channel. A list longer than the image's channels is used from its
  /// start (the RGB defaults serve a grayscale batch).
  std::vector<float> mean{nodes::Normalize::imagenet_mean.begin(), nodes::Normalize::imagenet_mean.end()};
  /// Per channel, like `mean`; each finite and > 0.
  std::vector<float> stddev{nodes::Normalize::imagenet_std.begin(), nodes::Normalize::imagenet_std.end()};
  /// The input value that means 1.0. 0: the input type's full scale -- 255 (u8), 65535 (u16),
  /// 32767 (i16) or 1 (f32); a 12-bit scan stored in u16 wants 4095.
  float range = 0;
  /// f32, bf16 or f16 (IEEE binary16); bf16 and f16 hold the f32 value rounded to nearest, ties to
  /// even (bf16_from_float, f16_from_float). Other types are refused.
  DType dtype = DType::f32;
  TensorLayout layout = TensorLayout::nchw;

  /// Throws std::invalid_argument naming the field and channel when a mean is not finite, a
  /// stddev is not finite and > 0, a list is empty or longer than max_convert_channels, range is
  /// negative or not finite, or dtype is not f32, bf16 or f16.
  void validate() const;
  /// validate(), and that the lists cover `channels` (1 value, or at least `channels`).
  void validate_for(int channels) const;
};

/// True for the input types convert takes: u8, u16, i16 and f32.
constexpr bool convertible(DType dtype) noexcept {
  return dtype == DType::u8 || dtype == DType::u16 || dtype == DType::i16 || dtype == DType::f32;
}

/// Bytes of n images of height x width x channels elements of `dtype` (either layout): what
/// convert writes, or (with the input's dtype) what it reads. Throws std::invalid_argument for a
/// negative size and std::overflow_error when the product does not fit in std::size_t.
std::size_t converted_bytes(std::size_t n, int height, int width, int channels, DType dtype);

/// Converts n images of height x width x channels elements of `src_dtype` at `src` (NHWC:
/// item-major, then rows, columns, interleaved channels) into `dst`, computing for channel c
///   out = (float(in) / range - mean[c]) / stddev[c]
/// in float (IEEE division, the same on the host and on a GPU), then storing it as options.dtype
/// in options.layout. For uint8 the f32 values are bit-identical to nodes::Normalize's (both look
/// the value up in a 256-entry table per channel computed by that expression); bf16 and f16 values
/// are the f32 ones rounded to nearest, ties to even (bf16_from_float, f16_from_float), on the host
/// and on a GPU alike.
///
/// `channels` is 1..max_convert_channels. `src` must be aligned to its element type, `dst` to its
/// own (4 bytes for f32, 2 for bf16 and f16), hold converted_bytes(n, height, width, channels,
/// options.dtype) bytes and not overlap `src`. n == 0 does nothing.
///
/// On a CUDA stream, `src` and `dst` are device pointers (of the stream's device) and the call
/// enqueues a kernel and returns; the buffers must stay valid until the stream has run it.
/// uint8 input with 1 to 3 channels takes vectorized table kernels (4-byte aligned `src`, 16-byte
/// (f32) or 8-byte (bf16, f16) aligned `dst`, and for NCHW height * width a multiple of 4;
/// otherwise a scalar one); other inputs take an element-wise kernel. On the host stream, they are
/// host pointers and the conversion is done before the call returns, items in parallel on the
/// caller's oneTBB arena (isolated: the calling thread runs no other task meanwhile): uint8 by table
/// lookup, the other inputs in branch-free loops the compiler vectorizes.
///
/// Throws std::invalid_argument for bad options (see ConvertOptions::validate_for), a src_dtype
/// that is not convertible(), a non-positive height or width, channels outside
/// 1..max_convert_channels, or a null or misaligned pointer with n > 0; DeviceError for a CUDA
/// stream in a build without CUDA, or a CUDA StreamView without a stream (CUDA's legacy default
/// stream is never used); CudaError when the launch fails. Thread-safe: calls on different streams
/// with different options may run concurrently.
void convert(const void* src, DType src_dtype, void* dst, std::size_t n, int height, int width, int channels,
             const ConvertOptions& options, StreamView stream);

/// convert() of uint8 pixels.
inline void convert_u8(const std::uint8_t* src, void* dst, std::size_t n, int height, int width, int channels,
                       const ConvertOptions& options, StreamView stream) {
  convert(src, DType::u8, dst, n, height, width, channels, options, stream);
}

}  // namespace stoke::gpu
