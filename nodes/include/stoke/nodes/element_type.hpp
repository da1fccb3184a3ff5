// ElementType: the element types of the fields of a batch (pixels, masks, targets), and their
// OpenCV depths.
//
//   stoke::nodes::ElementType t = stoke::nodes::element_type_of_depth(image.depth()).value();
//   std::size_t bytes = pixels * stoke::nodes::element_size(t);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace stoke::nodes {

/// The element type of a batch field.
enum class ElementType : std::uint8_t {
  u8,   ///< uint8: 8-bit pixels, class-id masks
  u16,  ///< uint16: 16-bit PNG, DICOM pixels, masks with many classes
  i16,  ///< int16: signed DICOM pixels (CT in Hounsfield units)
  i32,  ///< int32: masks with many classes
  f32,  ///< float32: normalized pixels, targets
};

/// Bytes per element: 1, 2, 2, 4 or 4.
constexpr std::size_t element_size(ElementType type) noexcept {
  switch (type) {
    case ElementType::u8:
      return 1;
    case ElementType::u16:
    case ElementType::i16:
      return 2;
    case ElementType::i32:
    case ElementType::f32:
      return 4;
  }
  return 0;
}

/// "u8", "u16", "i16", "i32" or "f32".
constexpr std::string_view to_string(ElementType type) noexcept {
  switch (type) {
    case ElementType::u8:
      return "u8";
    case ElementType::u16:
      return "u16";
    case ElementType::i16:
      return "i16";
    case ElementType::i32:
      return "i32";
    case ElementType::f32:
      return "f32";
  }
  return "unknown";
}

/// The OpenCV depth of `type` (CV_8U, CV_16U, CV_16S, CV_32S, CV_32F), without including OpenCV.
constexpr int cv_depth(ElementType type) noexcept {
  switch (type) {
    case ElementType::u8:
      return 0;  // CV_8U
    case ElementType::u16:
      return 2;  // CV_16U
    case ElementType::i16:
      return 3;  // CV_16S
    case ElementType::i32:
      return 4;  // CV_32S
    case ElementType::f32:
      return 5;  // CV_32F
  }
  return -1;
}

/// The element type of an OpenCV depth, or nullopt for a depth batches do not hold (CV_8S, CV_64F, ...).
constexpr std::optional<ElementType> element_type_of_depth(int depth) noexcept {
  for (ElementType type : {ElementType::u8, ElementType::u16, ElementType::i16, ElementType::i32, ElementType::f32})
    if (cv_depth(type) == depth) return type;
  return std::nullopt;
}

/// The ElementType of a C++ element type: element_type_v<std::uint16_t> == ElementType::u16.
template <class T>
inline constexpr std::optional<ElementType> element_type_v = std::nullopt;
template <>
inline constexpr std::optional<ElementType> element_type_v<std::uint8_t> = ElementType::u8;
template <>
inline constexpr std::optional<ElementType> element_type_v<std::uint16_t> = ElementType::u16;
template <>
inline constexpr std::optional<ElementType> element_type_v<std::int16_t> = ElementType::i16;
template <>
inline constexpr std::optional<ElementType> element_type_v<std::int32_t> = ElementType::i32;
template <>
inline constexpr std::optional<ElementType> element_type_v<float> = ElementType::f32;

}  // namespace stoke::nodes
