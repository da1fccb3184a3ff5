// Boxes: the detection field of a sample -- axis-aligned boxes with their classes -- and the
// geometry every transform applies to them, so that a crop, resize or flip moves the boxes exactly
// as it moves the pixels.
//
//   Boxes boxes;
//   boxes.add({10, 20, 110, 80}, /*cls=*/3);               // x0, y0, x1, y1 in pixels
//   crop_resize_boxes(boxes, cv::Rect(0, 0, 200, 100), cv::Size(100, 50));  // halves them
//   filter_boxes(boxes, {.min_visible = 0.25f, .min_size = 2.0f});
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <opencv2/core/types.hpp>
#include <span>
#include <string>
#include <vector>

namespace stoke::nodes {

/// Boxes in the image's pixel coordinates, continuous: x runs from 0 (the left edge of column 0)
/// to the width (the right edge of the last column), so a box covering just pixel (0, 0) is
/// [0, 1] x [0, 1]; x0 <= x1 and y0 <= y1. Coordinates refer to the image as decoded (upright when
/// the decoder applies the EXIF orientation), like the mask. Each box has a class, `extras`
/// further values (a score, "iscrowd", ...) and the fraction of its area still inside the crops
/// applied so far (1 when it enters the pipeline).
struct Boxes {
  std::vector<std::array<float, 4>> xyxy{};  ///< x0, y0, x1, y1 per box
  std::vector<std::int32_t> classes{};
  int extras = 0;             ///< extra values per box
  std::vector<float> extra{};  ///< size() x extras, row-major
  std::vector<float> visible{};

  std::size_t size() const noexcept { return classes.size(); }
  bool empty() const noexcept { return classes.empty(); }
  /// Appends a box, fully visible; `extra_values` must hold `extras` values.
  void add(std::array<float, 4> box, std::int32_t cls, std::span<const float> extra_values = {});
  /// Keeps the boxes whose index `keep` says true of, in order; all fields follow.
  void keep_if(const std::vector<bool>& keep);

  friend bool operator==(const Boxes&, const Boxes&) = default;
};

/// Throws std::invalid_argument starting with `what` when the fields disagree in length, a
/// coordinate is not finite or a box is inverted (x1 < x0 or y1 < y0), or a visible fraction is
/// outside [0, 1].
void check_boxes(const Boxes& boxes, const std::string& what);

/// The geometry of "take `crop` of the image (in its pixels; it may reach beyond the image, where a
/// transform pads) and scale it to `out`": each box is translated by the crop's corner, scaled by
/// out / crop, and clipped to [0, out]; its visible fraction is multiplied by (area after clipping
/// / area before). A box with no area left inside is dropped; a box that had none to begin with (a
/// point or a line) is kept while it lies inside.
void crop_resize_boxes(Boxes& boxes, cv::Rect crop, cv::Size out);

/// The geometry of mirroring an image of `width` pixels left-right: x -> width - x.
void flip_boxes_horizontally(Boxes& boxes, int width);

/// The rule for dropping boxes that crops have cut down.
struct BoxFilter {
  float min_visible = 0.0f;  ///< drop a box with less than this fraction of its area left
  float min_size = 0.0f;     ///< drop a box narrower or lower than this many pixels
};

/// Drops the boxes `filter` rules out; returns how many.
std::size_t filter_boxes(Boxes& boxes, const BoxFilter& filter);

}  // namespace stoke::nodes
