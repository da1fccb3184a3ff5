// RandomResizedCrop: torchvision's random crop of random area and aspect ratio, resized to a fixed
// output size; the standard ImageNet training augmentation, and fusable into JPEG decoding.
#pragma once

#include <opencv2/core/types.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "stoke/nodes/resize.hpp"
#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// Picks a crop exactly as torchvision.transforms.RandomResizedCrop.get_params does (same
/// formulas, same order of draws; the numbers come from ItemRng, not torch's generator), then
/// resizes it to `size` with resize_pixels(). Immutable and thread-safe; takes uint8 HWC images.
///
/// get_params: up to 10 attempts of
///   target_area = H*W * uniform(scale), aspect = exp(uniform(log ratio.min, log ratio.max)),
///   w = round(sqrt(target_area * aspect)), h = round(sqrt(target_area / aspect)),
///   accepted if 0 < w <= W and 0 < h <= H; then top = uniform_int(0, H-h), left = uniform_int(0, W-w).
/// If no attempt fits, the central crop of the whole image with its aspect ratio clamped to
/// `ratio`. Rounding is Python's (half to even).
class RandomResizedCrop final : public Transform {
 public:
  /// A closed interval [min, max].
  struct Range {
    double min;
    double max;
  };

  /// `size`: output width x height (> 0). `scale`: crop area as a fraction of the image's,
  /// 0 < min <= max <= 1. `ratio`: crop width / height, 0 < min <= max. Throws
  /// std::invalid_argument naming the parameter otherwise.
  explicit RandomResizedCrop(cv::Size size, Range scale = {0.08, 1.0}, Range ratio = {3.0 / 4.0, 4.0 / 3.0},
                             Interpolation interpolation = Interpolation::bilinear);

  std::string_view name() const noexcept override { return "random_resized_crop"; }
  std::string describe() const override;

  /// The crop for a `source`-sized image (torchvision's get_params) and out = size(). Draws the
  /// same numbers apply_impl draws, so "decode plan().crop, resize to plan().out" equals
  /// "decode, apply" up to the decoder's DCT scaling.
  std::optional<Region> plan(cv::Size source, ItemRng& rng) const override;

  /// torchvision's get_params for a `source`-sized image: the crop rectangle in source pixels.
  cv::Rect crop_for(cv::Size source, ItemRng& rng) const;

  cv::Size size() const noexcept { return size_; }
  Range scale() const noexcept { return scale_; }
  Range ratio() const noexcept { return ratio_; }
  Interpolation interpolation() const noexcept { return interpolation_; }

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override;

 private:
  cv::Size size_;
  Range scale_;
  Range ratio_;
  Interpolation interpolation_;
};

}  // namespace stoke::nodes
