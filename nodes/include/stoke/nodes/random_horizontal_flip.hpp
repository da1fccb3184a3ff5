// RandomHorizontalFlip: mirror an image left-right with probability p.
#pragma once

#include <string>
#include <string_view>

#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// Mirrors the image left-right with probability `p`, decided by exactly one
/// ItemRng::bernoulli(p) draw per item (also when p is 0 or 1, so that the transforms after it see
/// the same random stream whatever p is). Works before and after normalize: uint8 HWC and float
/// CHW images are both mirrored row by row. Immutable and thread-safe.
class RandomHorizontalFlip final : public Transform {
 public:
  /// `p` in [0, 1]; throws std::invalid_argument otherwise.
  explicit RandomHorizontalFlip(double p = 0.5);

  std::string_view name() const noexcept override { return "random_horizontal_flip"; }
  std::string describe() const override;
  bool accepts(PixelLayout layout) const noexcept override {
    return layout == PixelLayout::hwc || layout == PixelLayout::chw_f32;
  }

  double p() const noexcept { return p_; }

 protected:
  void apply_impl(Image& image, ItemRng& rng) const override;

 private:
  double p_;
};

}  // namespace stoke::nodes
