// DType and TensorLayout: the element types and memory layouts of tensors on the compute side,
// and bfloat16 <-> float conversion on the host.
//
//   std::size_t bytes = n * c * h * w * stoke::gpu::element_size(stoke::gpu::DType::bf16);
//   std::uint16_t one = stoke::gpu::bf16_from_float(1.0f);   // 0x3f80
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace stoke::gpu {

/// The element type of a tensor.
enum class DType : std::uint8_t {
  u8,    ///< unsigned 8-bit integer (pixels as decoded)
  f32,   ///< IEEE binary32
  bf16,  ///< bfloat16: binary32's sign and exponent with a 7-bit mantissa, stored as uint16 bits
};

/// Bytes per element: 1, 4 or 2.
constexpr std::size_t element_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::u8:
      return 1;
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
  }
  return 0;
}

/// "u8", "f32" or "bf16".
constexpr std::string_view to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::u8:
      return "u8";
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
  }
  return "unknown";
}

/// How the items of a batch of images are laid out, outermost dimension first.
enum class TensorLayout : std::uint8_t {
  nchw,  ///< item, channel plane, row, column (PyTorch's default; cuDNN's NCHW)
  nhwc,  ///< item, row, column, interleaved channels (channels-last; cuDNN's NHWC)
};

/// "nchw" or "nhwc".
constexpr std::string_view to_string(TensorLayout layout) noexcept {
  switch (layout) {
    case TensorLayout::nchw:
      return "nchw";
    case TensorLayout::nhwc:
      return "nhwc";
  }
  return "unknown";
}

/// The bfloat16 nearest to `value`, ties to even (what CUDA's __float2bfloat16_rn gives), as its
/// bits. Infinities stay infinite, a value past bfloat16's largest finite one rounds to infinity,
/// subnormals round like any other value, and every NaN becomes CUDA's canonical NaN 0x7fff.
constexpr std::uint16_t bf16_from_float(float value) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  // Adding 0x7fff rounds half-way cases down; adding the kept part's lowest bit on top makes them
  // round to even. A carry out of the mantissa correctly increments the exponent.
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

/// The float whose value the bfloat16 `bits` hold (exact: every bfloat16 is a float).
constexpr float float_from_bf16(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

}  // namespace stoke::gpu
