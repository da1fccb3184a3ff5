// Transform: one augmentation step on an Image (crop, resize, flip, colour, normalize, or a user's
// own), the unit the registry builds from a spec string and the apps chain with --transform.
#pragma once

#include <memory>
#include <opencv2/core/types.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/image.hpp"
#include "stoke/nodes/random.hpp"

namespace stoke::nodes {

/// "Take `crop` of the source image (in source pixels) and resize it to `out`": what a transform
/// that starts with a crop-and-resize can hand to the decoder, which then decodes only that region
/// at the smallest DCT scale that still leaves it at least `out` large (see decode.hpp).
struct Region {
  cv::Rect crop;
  cv::Size out;
};

/// A per-channel map of pixels to float, out[c] = (x[c] / range - mean[c]) / stddev[c] (range 0:
/// the pixel type's full scale), as Normalize does it.
struct PixelNormalization {
  std::vector<float> mean;
  std::vector<float> stddev;
  float range = 0;
};

/// A step of augmentation. Implementations are immutable after construction and thread-safe:
/// all per-item randomness comes from the ItemRng passed in, which is derived from
/// (seed, epoch, index), so results do not depend on the thread that runs them.
///
/// A step sees the whole Image: a geometric one (crop, resize, flip) applies one geometry to the
/// pixels, the mask (nearest-neighbour: resize.hpp's *_fields helpers) and the boxes (boxes.hpp:
/// moved, clipped, dropped when nothing is left inside); a photometric one changes the pixels
/// only; a user's step may read or write the targets too. A user's geometric step must move the
/// mask and boxes itself, with the same helpers.
class Transform {
 public:
  virtual ~Transform() = default;

  /// The name it is registered under, e.g. "random_resized_crop".
  virtual std::string_view name() const noexcept = 0;
  /// A one-line description with the parameter values, e.g. "random_resized_crop size=224 ...".
  virtual std::string describe() const { return std::string(name()); }

  /// Applies the step in place. Throws std::invalid_argument naming the transform and the item
  /// when the image's fields do not fit together (check_fields) or the step cannot take it
  /// (refuses(): e.g. a crop after normalize, colour jitter on a 1-channel image).
  void operator()(Image& image, ItemRng& rng) const;

  /// For transforms that begin with "crop a region, resize it": the region for a source of size
  /// `source`, drawing exactly the random numbers apply would draw first, so that
  /// "plan + decode the region + finish" gives the same geometry as "decode + apply".
  /// nullopt (the default) when the transform cannot be fused into decoding.
  virtual std::optional<Region> plan(cv::Size source, ItemRng& rng) const;

  /// What this step is when it is only a PixelNormalization (HWC pixels to normalized float CHW,
  /// nothing else), so that a consumer may do it elsewhere -- train leaves a trailing one to the
  /// device's convert -- and the batches it ends are float NCHW; nullopt (the default) otherwise.
  virtual std::optional<PixelNormalization> normalization() const { return std::nullopt; }

  /// The pixel layouts this step accepts (default: hwc only, i.e. before normalize).
  virtual bool accepts(PixelLayout layout) const noexcept { return layout == PixelLayout::hwc; }
  /// Why this step cannot take `image`, or an empty string when it can. The default refuses a
  /// layout accepts() says no to, and takes any pixel type and channel count; steps with narrower
  /// needs (colour jitter: 8-bit RGB) say so here.
  virtual std::string refuses(const Image& image) const;

 protected:
  virtual void apply_impl(Image& image, ItemRng& rng) const = 0;
};

using TransformPtr = std::shared_ptr<const Transform>;

/// Applies `transforms` in order with one ItemRng per item derived from (seed, image.epoch,
/// image.index): the augmentation stage of a pipeline. Copyable, thread-safe.
class Augment {
 public:
  Augment(std::vector<TransformPtr> transforms, std::uint64_t seed);

  Image operator()(Image image) const;

  const std::vector<TransformPtr>& transforms() const noexcept { return transforms_; }
  std::uint64_t seed() const noexcept { return seed_; }
  /// The ItemRng an item starts its augmentation with.
  ItemRng rng_for(std::uint32_t epoch, std::uint64_t index) const noexcept { return ItemRng(seed_, epoch, index, 1); }

 private:
  std::vector<TransformPtr> transforms_;
  std::uint64_t seed_;
};

}  // namespace stoke::nodes
