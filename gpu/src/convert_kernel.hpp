// Private to stoke::gpu: what convert.cpp (validation, the table, dispatch) hands to the CUDA
// build's kernel launcher in cuda/convert.cu. Includes no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "stoke/gpu/convert.hpp"
#include "stoke/gpu/dtype.hpp"
#include "stoke/gpu/stream.hpp"

namespace stoke::gpu::detail {

/// values[c][v] = (float(v) / range - mean[c]) / stddev[c], computed in float on the host exactly
/// as nodes::Normalize computes its table (range 255), so that every path that looks values up
/// here agrees with it bit for bit. Plain arrays, so that device code can index it; 16-byte
/// aligned, so that a kernel can copy it in float4s. For uint8 input of 1 to 3 channels.
struct ConvertTable {
  alignas(16) float values[3][256];
};

/// The expression's constants for any input: out = (float(in) / range - mean[c]) / stddev[c].
struct ConvertParams {
  float mean[max_convert_channels];
  float stddev[max_convert_channels];
  float range;
};

/// Enqueues the uint8 table conversion on `stream` (a CUDA stream). Arguments already validated
/// by convert: n > 0, height and width > 0, channels in 1..3, dtype f32, bf16 or f16, pointers not
/// null and aligned. Throws CudaError when the launch fails.
void launch_convert_u8(const std::uint8_t* src, void* dst, std::size_t n, int height, int width, int channels,
                       const ConvertTable& table, DType dtype, TensorLayout layout, StreamView stream);

/// Enqueues the element-wise conversion of any convertible input, channels in
/// 1..max_convert_channels, on `stream` (a CUDA stream). Arguments already validated by convert.
void launch_convert(const void* src, DType src_dtype, void* dst, std::size_t n, int height, int width, int channels,
                    const ConvertParams& params, DType dtype, TensorLayout layout, StreamView stream);

}  // namespace stoke::gpu::detail
