// DType and TensorLayout: the element types and memory layouts of tensors on the compute side,
// and bfloat16 <-> float and binary16 <-> float conversion on the host.
//
//   std::size_t bytes = n * c * h * w * stoke::gpu::element_size(stoke::gpu::DType::bf16);
//   std::uint16_t one = stoke::gpu::bf16_from_float(1.0f);   // 0x3f80
//   std::uint16_t half = stoke::gpu::f16_from_float(1.0f);   // 0x3c00
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
  f16,   ///< IEEE binary16 (half): 5-bit exponent, 10-bit mantissa, stored as uint16 bits
  i32,   ///< signed 32-bit integer (class labels)
  u16,   ///< unsigned 16-bit integer (16-bit PNG, TIFF, DICOM pixels)
  i16,   ///< signed 16-bit integer (DICOM pixels, e.g. CT in Hounsfield units)
};

/// Bytes per element: 1 (u8), 2 (bf16, f16, u16, i16) or 4 (f32, i32).
constexpr std::size_t element_size(DType dtype) noexcept {
  switch (dtype) {
    case DType::u8:
      return 1;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::f16:
    case DType::u16:
    case DType::i16:
      return 2;
  }
  return 0;
}

/// "u8", "f32", "bf16", "f16", "i32", "u16" or "i16".
constexpr std::string_view to_string(DType dtype) noexcept {
  switch (dtype) {
    case DType::u8:
      return "u8";
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::u16:
      return "u16";
    case DType::i16:
      return "i16";
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

/// The binary16 nearest to `value`, ties to even (what CUDA's __float2half_rn gives), as its bits.
/// Infinities stay infinite, a value from 65520 up (half-way past binary16's largest finite one,
/// 65504) rounds to infinity, a value below 2^-14 becomes a correctly rounded subnormal (or zero,
/// at or below 2^-25), and every NaN becomes the canonical quiet NaN 0x7e00.
constexpr std::uint16_t f16_from_float(float value) noexcept {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0x7e00;
  if (magnitude >= 0x47800000u) return sign | 0x7c00u;  // 2^16 and up, infinity included
  if (magnitude >= 0x38800000u) {
    // A normal binary16: rebias the exponent (127 -> 15) and drop 13 mantissa bits, rounding as
    // bf16_from_float does. A carry out of the mantissa increments the exponent, up to infinity.
    const std::uint32_t rounded = magnitude + 0x0fffu + ((magnitude >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  if (magnitude <= 0x33000000u) return sign;  // 2^-25 and below: zero (2^-25 is a tie, to even)
  // A subnormal binary16 holds m * 2^-24. The float is mantissa * 2^(exponent - 150), so m is the
  // 24-bit mantissa (implicit bit included) shifted right by 126 - exponent (14 to 24 here),
  // rounded to nearest even; m = 0x400 is the smallest normal, which is its own encoding.
  const std::uint32_t exponent = magnitude >> 23;
  const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - exponent;
  const std::uint32_t kept = mantissa >> shift;
  const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1u);
  const std::uint32_t m = kept + ((rest > half || (rest == half && (kept & 1u) != 0)) ? 1u : 0u);
  return static_cast<std::uint16_t>(sign | m);
}

/// The float whose value the binary16 `bits` hold (exact: every binary16 is a float). A NaN stays
/// a NaN with the same sign and payload in its top mantissa bits.
constexpr float float_from_f16(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // A subnormal, mantissa * 2^-24: shift it up until its leading bit is the implicit one.
  std::uint32_t float_exponent = 113u;  // 2^-14, the exponent of the smallest normal binary16
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  return std::bit_cast<float>(sign | (float_exponent << 23) | ((mantissa & 0x3ffu) << 13));
}

}  // namespace stoke::gpu
