// Resize: scale an image so its shorter side is N (torchvision's Resize(int)) or to an exact
// W x H; and resize_pixels(), the resize kernel that Resize, RandomResizedCrop and the decoder's
// fused crop-and-resize path all end with, so fused and unfused pipelines finish alike.
#pragma once

#include <opencv2/core/mat.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// How pixels are resampled when an image changes size.
enum class Interpolation {
  /// cv::INTER_LINEAR, except when shrinking in both directions and by 2x or more in at least
  /// one, where it uses pixel-area averaging (cv::INTER_AREA) so that strong downscales (a
  /// 2000-pixel photo to 224) do not alias, like torchvision's antialias=True / PIL's bilinear.
  /// Below 2x, bilinear's 2x2 footprint still covers the source well, and OpenCV's non-integer
  /// INTER_AREA costs about 7x more (e.g. 300x250 -> 224x224: ~0.7 ms against ~0.1 ms). The
  /// decoder's fused path leaves less than 2x after its DCT scaling, so it mostly ends here.
  bilinear,
  /// Pixel-area averaging (cv::INTER_AREA) for every shrink, cv::INTER_LINEAR when enlarging:
  /// the best quality, slower.
  area,
  /// Nearest neighbour (cv::INTER_NEAREST): for label maps and masks.
  nearest,
};

/// "bilinear", "area" or "nearest".
std::string_view to_string(Interpolation interpolation) noexcept;
/// Parses "bilinear", "area" or "nearest"; throws std::invalid_argument naming `what` (e.g. "resize")
/// and the accepted values otherwise.
Interpolation parse_interpolation(std::string_view text, std::string_view what);

/// Returns `src` (any cv::resize type, e.g. CV_8UC3) resampled to `out` as a new continuous
/// matrix; a plain copy when the size already matches. Never writes into `src`. Deterministic
/// and independent of the calling thread. Throws std::invalid_argument when `out` or `src` is
/// empty.
cv::Mat resize_pixels(const cv::Mat& src, cv::Size out, Interpolation interpolation);

/// Returns `mask` (one channel of class ids) resampled to `out` by nearest neighbour with pixel
/// centres aligned (cv::INTER_NEAREST_EXACT: output pixel x takes source pixel
/// floor((x + 0.5) * source / out)), as a new continuous matrix, so that it stays on the image a
/// bilinear resize of the same size produces. Throws like resize_pixels.
cv::Mat resize_mask(const cv::Mat& mask, cv::Size out);

/// The geometry of crop-and-resize steps, applied to every spatial field of `image`: `crop` (in
/// the pixels' coordinates, inside them) cut out and resized to `out`, the pixels with
/// resize_pixels(interpolation), the mask (if any) with resize_mask, the boxes (if any) with
/// crop_resize_boxes. Precondition: hwc layout.
void crop_resize_fields(Image& image, cv::Rect crop, cv::Size out, Interpolation interpolation);

/// torchvision's Resize. With a shorter-side size N, an H x W image becomes N x int(N * W / H)
/// (or the transpose), e.g. 500x375 -> Resize(256) -> 341x256 (width x height); with an exact
/// size it becomes exactly that. Fusable into decoding: plan() returns the whole image as the
/// region, so the decoder can use a DCT-scaled decode. Draws no random numbers. Resizes the mask
/// too (resize_mask). Immutable and thread-safe; takes HWC images of any pixel type.
class Resize final : public Transform {
 public:
  /// Shorter side becomes `shorter_side` (> 0) pixels, the longer one keeps the aspect ratio.
  explicit Resize(int shorter_side, Interpolation interpolation = Interpolation::bilinear);
  /// Output is exactly `size` (width x height, both > 0).
  explicit Resize(cv::Size size, Interpolation interpolation = Interpolation::bilinear);

  std::string_view name() const noexcept override { return "resize"; }
  std::string describe() const override;
  std::optional<Region> plan(cv::Size source, ItemRng& rng) const override;

  /// The output size for a `source`-sized input (width x height).
  cv::Size output_size(cv::Size source) const;

  /// 0 when an exact size was given.
  int shorter_side() const noexcept { return shorter_side_; }
  /// Empty when a shorter-side size was given.
  cv::Size exact_size() const noexcept { return exact_; }
  Interpolation interpolation() const noexcept { return interpolation_; }

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override;

 private:
  int shorter_side_ = 0;
  cv::Size exact_;
  Interpolation interpolation_;
};

}  // namespace stoke::nodes
