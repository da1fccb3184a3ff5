// Normalize: uint8 HWC -> normalized float CHW in one pass, the last CPU augmentation step.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// Converts a uint8 HWC RGB image to float CHW and normalizes it, in one pass:
///   out[c][y][x] = (in[y][x][c] / 255 - mean[c]) / stddev[c]     (computed in float)
/// The result is Image::pixels as CV_32FC1 of (3*H) x W (planes R, G, B) with layout chw_f32,
/// bit-identical to torchvision's ToTensor() + Normalize(mean, std) in float32. `mean` and
/// `stddev` are on the 0..1 scale. As the input has only 256 values per channel, the step is a
/// per-channel 256-entry table lookup: exact, and as fast as a vectorized version of the
/// formula with its two divisions (a scale-and-offset form would be ~2x faster, but not exact).
/// Writes a new matrix; the input buffer is never written.
/// Immutable and thread-safe; takes uint8 HWC images only.
class Normalize final : public Transform {
 public:
  static constexpr std::array<float, 3> imagenet_mean{0.485f, 0.456f, 0.406f};
  static constexpr std::array<float, 3> imagenet_std{0.229f, 0.224f, 0.225f};

  /// Per channel (R, G, B): `mean` finite, `stddev` finite and > 0; throws std::invalid_argument
  /// naming the parameter and channel otherwise.
  explicit Normalize(std::array<float, 3> mean = imagenet_mean, std::array<float, 3> stddev = imagenet_std);

  std::string_view name() const noexcept override { return "normalize"; }
  std::string describe() const override;

  const std::array<float, 3>& mean() const noexcept { return mean_; }
  const std::array<float, 3>& stddev() const noexcept { return stddev_; }

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override;

 private:
  std::array<float, 3> mean_;
  std::array<float, 3> stddev_;
  std::array<std::array<float, 256>, 3> table_;  // table_[c][v] = (v / 255 - mean[c]) / stddev[c]
};

}  // namespace stoke::nodes
