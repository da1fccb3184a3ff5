// FilterBoxes: the stated rule for boxes that crops have cut down -- drop those with less than a
// fraction of their area left, or narrower or lower than a number of pixels.
#pragma once

#include <string>
#include <string_view>

#include "stoke/nodes/boxes.hpp"
#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// Applies filter_boxes(image.boxes, filter) (boxes.hpp); pixels and mask untouched. Place it after
/// the geometric steps (`random_resized_crop size=512`, `random_horizontal_flip`, `filter_boxes
/// min_visible=0.3 min_size=2`): each crop multiplies a box's visible fraction by the share of its
/// area it keeps, so the rule sees what is left of each box over the whole chain. Draws no random
/// numbers. Works before and after normalize. Immutable and thread-safe.
class FilterBoxes final : public Transform {
 public:
  /// min_visible in [0, 1], min_size >= 0; throws std::invalid_argument naming the parameter.
  explicit FilterBoxes(BoxFilter filter);

  std::string_view name() const noexcept override { return "filter_boxes"; }
  std::string describe() const override;
  bool accepts(PixelLayout layout) const noexcept override {
    return layout == PixelLayout::hwc || layout == PixelLayout::chw_f32;
  }
  const BoxFilter& filter() const noexcept { return filter_; }

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override;

 private:
  BoxFilter filter_;
};

}  // namespace stoke::nodes
