// convert_u8: uint8 NHWC images -> normalized f32 or bf16, NCHW or NHWC. The GPU-side counterpart
// of nodes::Normalize: batches cross to the device as uint8 (4x fewer bytes than float) and a
// kernel on the compute stream converts them there.
//
//   stoke::gpu::ConvertOptions options{.dtype = stoke::gpu::DType::bf16};
//   stoke::gpu::DeviceBuffer out(device, stoke::gpu::converted_bytes(n, 224, 224, 3, options.dtype));
//   stoke::gpu::convert_u8(in.as<std::uint8_t>(), out.data(), n, 224, 224, 3, options, compute);
//   // enqueued on `compute`; `in` must stay valid until the stream has run it
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "stoke/gpu/dtype.hpp"
#include "stoke/gpu/stream.hpp"
#include "stoke/nodes/normalize.hpp"

namespace stoke::gpu {

/// What convert_u8 computes: out = (in / 255 - mean[c]) / stddev[c] in float, stored as `dtype`
/// in `layout`. The defaults are nodes::Normalize's (ImageNet's mean and std, float CHW).
struct ConvertOptions {
  /// Per channel (R, G, B), on the 0..1 scale.
  std::array<float, 3> mean = nodes::Normalize::imagenet_mean;
  /// Per channel (R, G, B), on the 0..1 scale.
  std::array<float, 3> stddev = nodes::Normalize::imagenet_std;
  /// f32, or bf16 (the f32 value rounded to nearest, ties to even). u8 and f16 are refused.
  DType dtype = DType::f32;
  TensorLayout layout = TensorLayout::nchw;

  /// Throws std::invalid_argument naming the field and channel when a mean is not finite, a
  /// stddev is not finite and > 0, or dtype is not f32 or bf16.
  void validate() const;
};

/// Bytes of n images of height x width x channels elements of `dtype` (either layout): what
/// convert_u8 writes, or (with DType::u8) what it reads. Throws std::invalid_argument for a
/// negative size and std::overflow_error when the product does not fit in std::size_t.
std::size_t converted_bytes(std::size_t n, int height, int width, int channels, DType dtype);

/// Converts n images of height x width x channels uint8 elements at `src` (NHWC: item-major, then
/// rows, columns, interleaved channels) into `dst`, computing for channel c
///   out = (float(in) / 255 - mean[c]) / stddev[c]
/// in float, then storing it as options.dtype in options.layout. The f32 values are bit-identical
/// to nodes::Normalize's (both look the value up in the same 256-entry table per channel, so CPU
/// and GPU agree exactly); bf16 values are those rounded to nearest, ties to even.
///
/// `channels` is 1, 2 or 3; channel c uses mean[c] and stddev[c] (a grayscale batch uses the
/// first entries). `dst` must hold converted_bytes(n, height, width, channels, options.dtype)
/// bytes, be aligned to its element type (4 bytes for f32, 2 for bf16) and not overlap `src`.
/// n == 0 does nothing.
///
/// On a CUDA stream, `src` and `dst` are device pointers (of the stream's device) and the call
/// enqueues a kernel and returns; the buffers must stay valid until the stream has run it. A
/// 4-byte aligned `src` with a 16-byte (f32) or 8-byte (bf16) aligned `dst` takes the vectorized
/// path (for an NCHW output, only when height * width is a multiple of 4); other alignments and
/// sizes take a scalar one, with the same results. On the host stream, they are host pointers and
/// the conversion is done before the call returns, items in parallel on the caller's oneTBB arena
/// (isolated: the calling thread runs no other task meanwhile).
///
/// Throws std::invalid_argument for bad options (see ConvertOptions::validate), a non-positive
/// height or width, channels outside 1..3, or a null or misaligned pointer with n > 0;
/// DeviceError for a CUDA stream in a build without CUDA, or a CUDA StreamView without a stream
/// (CUDA's legacy default stream is never used); CudaError when the launch fails. Thread-safe:
/// calls on different streams with different options may run concurrently.
void convert_u8(const std::uint8_t* src, void* dst, std::size_t n, int height, int width, int channels,
                const ConvertOptions& options, StreamView stream);

}  // namespace stoke::gpu
