// ColorJitter: torchvision's random brightness, contrast, saturation and hue changes, applied in
// a random order; plus the four kernels it is made of, usable on their own.
#pragma once

#include <opencv2/core/mat.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

// ---- kernels: uint8 RGB (CV_8UC3) in, a new CV_8UC3 out; the input is never written -----------
// Results are rounded to nearest and clamped to [0, 255] (ties: up for brightness and contrast;
// to even for saturation and hue, which end in OpenCV's saturate_cast). Gray is ITU-R 601-2
// luma, 0.299 R + 0.587 G + 0.114 B. Each throws std::invalid_argument for another type or a
// negative factor (hue: a shift outside [-0.5, 0.5]).

/// Blend with black: round(v * factor).
cv::Mat adjust_brightness(const cv::Mat& rgb, double factor);
/// Blend with the image's mean gray level m: round(factor * v + (1 - factor) * m). Factor 0 gives
/// a constant image of round(m).
cv::Mat adjust_contrast(const cv::Mat& rgb, double factor);
/// Blend each pixel with its own gray level g: round(factor * v + (1 - factor) * g), where g is
/// the luma rounded to 8 bits first, as PIL does (OpenCV's RGB2GRAY, 14-bit fixed-point weights).
/// Factor 0 gives gray (R = G = B).
cv::Mat adjust_saturation(const cv::Mat& rgb, double factor);
/// Rotates the hue by `shift` turns (-0.5..0.5; 0.5 = 180 degrees) in HSV, as torchvision's
/// adjust_hue does; computed in float, so slower than the other three.
cv::Mat adjust_hue(const cv::Mat& rgb, double shift);

/// torchvision's ColorJitter. Per item: a random order of the enabled adjustments (a
/// Fisher-Yates shuffle with ItemRng), then one factor per enabled adjustment drawn uniformly from
/// its range, in the fixed order brightness, contrast, saturation, hue; then the adjustments in
/// the shuffled order. Immutable and thread-safe; takes 8-bit RGB images (3 channels, before
/// normalize) and changes their pixels only (a mask stays as it is).
class ColorJitter final : public Transform {
 public:
  /// A closed interval [min, max].
  struct Range {
    double min;
    double max;
  };
  /// Explicit factor ranges; nullopt (or the identity range [1, 1], hue [0, 0]) disables one.
  struct Ranges {
    std::optional<Range> brightness = std::nullopt;  ///< 0 <= min <= max
    std::optional<Range> contrast = std::nullopt;    ///< 0 <= min <= max
    std::optional<Range> saturation = std::nullopt;  ///< 0 <= min <= max
    std::optional<Range> hue = std::nullopt;         ///< -0.5 <= min <= max <= 0.5 (turns)
  };

  /// torchvision's ColorJitter(brightness, contrast, saturation, hue): brightness factor in
  /// [max(0, 1 - brightness), 1 + brightness], the same for contrast and saturation (each >= 0),
  /// hue shift in [-hue, hue] (0 <= hue <= 0.5). 0 disables an adjustment. Throws
  /// std::invalid_argument naming the parameter when out of range.
  explicit ColorJitter(double brightness, double contrast = 0, double saturation = 0, double hue = 0);
  /// Explicit ranges, validated as documented on Ranges.
  explicit ColorJitter(Ranges ranges);

  std::string_view name() const noexcept override { return "color_jitter"; }
  std::string describe() const override;

  /// The enabled ranges (disabled ones are nullopt).
  const Ranges& ranges() const noexcept { return ranges_; }

  std::string refuses(const Image& image) const override;

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override;

 private:
  Ranges ranges_;
};

}  // namespace stoke::nodes
