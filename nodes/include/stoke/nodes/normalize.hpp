// Normalize: HWC pixels of any type and channel count -> normalized float CHW in one pass, the
// last CPU augmentation step.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// Converts an HWC image to float CHW and normalizes it, in one pass:
///   out[c][y][x] = (float(in[y][x][c]) / range - mean[c]) / stddev[c]     (computed in float)
/// The result is Image::pixels as CV_32FC1 of (C*H) x W (one plane per channel) with layout
/// chw_f32 and Image::planes = C. The mask and targets are left as they are.
///
/// - `range` is the input value that means 1.0; 0 (the default) takes the pixel type's full scale:
///   255 (uint8), 65535 (uint16), 32767 (int16) or 1 (float32). A 12-bit scan stored in uint16
///   wants 4095; CT in Hounsfield units (int16) usually wants range 1 and mean/std in HU.
/// - `mean` and `stddev` hold one value per channel, or a single value for every channel; a
///   longer list is used from its start (the RGB defaults serve a grayscale image). A list of
///   2..C-1 values for a C-channel image is refused, naming the image.
///
/// For uint8 input the values are looked up in a 256-entry table per channel computed by the same
/// expression: exact, and bit-identical to torchvision's ToTensor() + Normalize(mean, std) in
/// float32 for RGB; the same expression (IEEE division) is what gpu::convert computes, on the host
/// and on a GPU, so the step can move to the device without changing a bit. Writes a new matrix
/// (from image_allocator(): a block an earlier output gave back, when one is kept); the input buffer
/// is never written. Immutable and thread-safe; takes HWC images.
class Normalize final : public Transform {
 public:
  static constexpr std::array<float, 3> imagenet_mean{0.485f, 0.456f, 0.406f};
  static constexpr std::array<float, 3> imagenet_std{0.229f, 0.224f, 0.225f};

  /// Each mean finite, each stddev finite and > 0, both lists non-empty, range finite and >= 0;
  /// throws std::invalid_argument naming the parameter and channel otherwise.
  explicit Normalize(std::vector<float> mean = {imagenet_mean.begin(), imagenet_mean.end()},
                     std::vector<float> stddev = {imagenet_std.begin(), imagenet_std.end()}, float range = 0);

  std::string_view name() const noexcept override { return "normalize"; }
  std::string describe() const override;
  std::string refuses(const Image& image) const override;
  std::optional<PixelNormalization> normalization() const override {
    return PixelNormalization{.mean = mean_, .stddev = stddev_, .range = range_};
  }

  const std::vector<float>& mean() const noexcept { return mean_; }
  const std::vector<float>& stddev() const noexcept { return stddev_; }
  /// As given (0: the pixel type's full scale).
  float range() const noexcept { return range_; }

  /// The range used for pixels of OpenCV depth `cv_depth`: range(), or that type's full scale.
  float range_for(int cv_depth) const noexcept;

  /// apply()'s arithmetic into memory of the caller's: `image` (HWC, which refuses() accepts)
  /// normalized as C planes of H x W floats at `planes` (C * H * W floats, contiguous), e.g. an
  /// item of a batch (Collate's one pass from decoded pixels to the batch). Throws
  /// std::invalid_argument naming the image for a pixel type it cannot take.
  void write_planes(const Image& image, float* planes) const;

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override;

 private:
  std::vector<float> mean_;
  std::vector<float> stddev_;
  float range_;
  // uint8 tables, one per listed channel (or per channel of the longer list):
  // tables_[c][v] = (float(v) / range_for(CV_8U) - mean[c]) / stddev[c].
  std::vector<std::array<float, 256>> tables_;
};

}  // namespace stoke::nodes
