#include "stoke/nodes/center_crop.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace stoke::nodes {

namespace {

/// One axis of torchvision's center_crop: where the kept source span starts, where it lands in
/// the output, and its length.
struct Span {
  int source = 0;
  int target = 0;
  int length = 0;
};

Span center_span(int image, int crop) {
  if (crop > image) return {0, (crop - image) / 2, image};  // padded: the whole side, centred
  // int(round((image - crop) / 2.0)), rounding half to even as Python does.
  return {static_cast<int>(std::nearbyint((image - crop) / 2.0)), 0, crop};
}

}  // namespace

CenterCrop::CenterCrop(cv::Size size) : size_(size) {
  if (size.width <= 0 || size.height <= 0) {
    throw std::invalid_argument("center_crop: size must be positive, got " + std::to_string(size.width) + "x" +
                                std::to_string(size.height));
  }
}

std::string CenterCrop::describe() const {
  return "center_crop size=" + std::to_string(size_.width) + "x" + std::to_string(size_.height);
}

std::optional<Region> CenterCrop::plan(cv::Size source, ItemRng& /*rng*/) const {
  if (source.width < size_.width || source.height < size_.height) return std::nullopt;
  const Span x = center_span(source.width, size_.width);
  const Span y = center_span(source.height, size_.height);
  return Region{cv::Rect(x.source, y.source, size_.width, size_.height), size_};
}

namespace {

/// `field`'s part of the crop, zero-padded where the crop is larger than the image. Always a new,
/// continuous matrix: the source buffer may be shared.
cv::Mat crop_field(const cv::Mat& field, const Span& x, const Span& y, cv::Size size) {
  const cv::Mat kept = field(cv::Rect(x.source, y.source, x.length, y.length));
  if (x.length == size.width && y.length == size.height) return kept.clone();
  cv::Mat out(size, field.type(), cv::Scalar::all(0));
  kept.copyTo(out(cv::Rect(x.target, y.target, x.length, y.length)));
  return out;
}

}  // namespace

void CenterCrop::apply_impl(Image& image, ItemRng& /*rng*/) const {
  const Span x = center_span(image.pixels.cols, size_.width);
  const Span y = center_span(image.pixels.rows, size_.height);
  image.pixels = crop_field(image.pixels, x, y, size_);
  if (!image.mask.empty()) image.mask = crop_field(image.mask, x, y, size_);  // padding: class 0
  // Output pixel (0, 0) is source pixel (x.source - x.target, y.source - y.target); no scaling.
  crop_resize_boxes(image.boxes, cv::Rect(x.source - x.target, y.source - y.target, size_.width, size_.height), size_);
}

}  // namespace stoke::nodes
