// Image: decoded pixels travelling from decode through augment to batch, with the fields that
// travel beside them (a segmentation mask, named targets).
#pragma once

#include <cstdint>
#include <map>
#include <opencv2/core/mat.hpp>
#include <string>
#include <vector>

#include "stoke/nodes/boxes.hpp"

namespace stoke::nodes {

/// How an Image's pixels are laid out.
enum class PixelLayout : std::uint8_t {
  /// rows x cols = H x W, channels interleaved (1 to CV_CN_MAX of them), elements of one of the
  /// pixel types below: what decode produces and the augmentations take.
  hwc,
  /// CV_32FC1 of (C*H) x W: C planes, normalized (what Normalize produces).
  chw_f32,
};

/// True for the element types an Image's pixels may have: uint8 (CV_8U), uint16 (CV_16U, 16-bit
/// PNG, DICOM), int16 (CV_16S, e.g. CT in Hounsfield units) and float32 (CV_32F).
constexpr bool is_pixel_depth(int cv_depth) noexcept {
  return cv_depth == CV_8U || cv_depth == CV_16U || cv_depth == CV_16S || cv_depth == CV_32F;
}

/// "uint8", "uint16", "int16", "float32", "int32" (a mask's), or "depth N" for another.
std::string depth_name(int cv_depth);

/// E.g. "uint16 1-channel 512x512", for messages.
std::string describe_pixels(const cv::Mat& pixels);

/// A small tensor beside the image: float32 values in row-major order and their shape (empty: a
/// scalar). Multi-label vectors, regression targets, per-sample extras.
struct Target {
  std::vector<std::int64_t> shape;
  std::vector<float> values;

  /// The number of values the shape calls for (1 for a scalar).
  std::int64_t elements() const noexcept;
  friend bool operator==(const Target&, const Target&) = default;
};

/// True for the element types a mask may have: class ids as uint8, uint16 or int32.
constexpr bool is_mask_depth(int cv_depth) noexcept {
  return cv_depth == CV_8U || cv_depth == CV_16U || cv_depth == CV_32S;
}

/// Decoded pixels, the fields beside them, and the identity of the item they came from.
///
/// Spatial fields (the pixels and the mask) share one geometry: a geometric transform (crop,
/// resize, flip) applies the same operation to each -- the pixels with its interpolation, the mask
/// with nearest-neighbour sampling, so class ids stay class ids. Photometric transforms (colour,
/// normalize) touch the pixels only.
struct Image {
  cv::Mat pixels;
  PixelLayout layout = PixelLayout::hwc;
  /// chw_f32 only: the number of planes (pixels.rows == planes * height); 3 (RGB) unless the
  /// transform that made the planes says otherwise.
  int planes = 3;
  /// A segmentation mask, or empty: height x width, one channel of class ids (is_mask_depth).
  cv::Mat mask{};
  /// Named targets beside `label` (e.g. "labels": a multi-label vector of 0/1, "age": a scalar).
  std::map<std::string, Target> targets{};
  int label = -1;
  std::uint64_t index = 0;
  std::uint32_t epoch = 0;
  std::string name{};
  /// Detection boxes, in the pixels' coordinates: geometric transforms move, clip and (when nothing
  /// is left inside) drop them with the pixels (boxes.hpp).
  Boxes boxes{};

  int width() const noexcept { return pixels.cols; }
  int height() const noexcept {
    return layout == PixelLayout::hwc || planes <= 0 ? pixels.rows : pixels.rows / planes;
  }
  int channels() const noexcept { return layout == PixelLayout::hwc ? pixels.channels() : planes; }
  /// The pixels' OpenCV depth (CV_8U, ...): CV_32F once normalized.
  int depth() const noexcept { return pixels.depth(); }
};

/// Throws std::invalid_argument naming the image (its name, else its index) and `what` (a
/// transform, "collate", ...) when its fields do not fit together: pixels of a type that is not
/// an image type for its layout, a chw_f32 image whose rows are not planes x height, a mask of
/// another size than the pixels or not one channel of class ids, or a target whose values do not
/// match its shape, or boxes that check_boxes refuses.
void check_fields(const Image& image, const std::string& what);

/// The image's name for messages: Image::name, or "item <index>" when it has none.
std::string item_name(const Image& image);

}  // namespace stoke::nodes
