// CenterCrop: torchvision's CenterCrop, including its zero padding of images smaller than the crop.
#pragma once

#include <opencv2/core/types.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// Cuts the centred `size` (width x height) rectangle out of the image. Offsets follow
/// torchvision: top = int(round((H - h) / 2.0)), left likewise, Python rounding (half to even), so
/// CenterCrop(224) of a 341x256 image starts at (left 58, top 16). A side smaller than the crop
/// is first padded with zeros, (crop - side) / 2 before and the rest after. Draws no random
/// numbers. Immutable and thread-safe; takes uint8 HWC images.
class CenterCrop final : public Transform {
 public:
  /// `size`: output width x height, both > 0; throws std::invalid_argument otherwise.
  explicit CenterCrop(cv::Size size);

  std::string_view name() const noexcept override { return "center_crop"; }
  std::string describe() const override;

  /// The centred rectangle with out = size() when `source` is at least size() in both
  /// directions; nullopt when padding is needed (the decoder cannot pad).
  std::optional<Region> plan(cv::Size source, ItemRng& rng) const override;

  cv::Size size() const noexcept { return size_; }

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override;

 private:
  cv::Size size_;
};

}  // namespace stoke::nodes
