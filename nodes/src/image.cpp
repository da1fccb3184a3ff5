#include "stoke/nodes/image.hpp"

#include <stdexcept>

namespace stoke::nodes {

std::string depth_name(int cv_depth) {
  switch (cv_depth) {
    case CV_8U:
      return "uint8";
    case CV_16U:
      return "uint16";
    case CV_16S:
      return "int16";
    case CV_32S:
      return "int32";
    case CV_32F:
      return "float32";
    default:
      return "depth " + std::to_string(cv_depth);
  }
}

std::string describe_pixels(const cv::Mat& pixels) {
  if (pixels.empty()) return "empty";
  return depth_name(pixels.depth()) + " " + std::to_string(pixels.channels()) + "-channel " +
         std::to_string(pixels.cols) + "x" + std::to_string(pixels.rows);
}

std::int64_t Target::elements() const noexcept {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

std::string item_name(const Image& image) {
  return image.name.empty() ? "item " + std::to_string(image.index) : image.name;
}

void check_fields(const Image& image, const std::string& what) {
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument(what + ": " + item_name(image) + ": " + why);
  };
  const cv::Mat& p = image.pixels;
  if (image.layout == PixelLayout::hwc) {
    if (!p.empty() && !is_pixel_depth(p.depth()))
      fail("pixels are " + describe_pixels(p) + "; an image holds uint8, uint16, int16 or float32 values");
  } else {
    if (p.type() != CV_32FC1 || image.planes <= 0 || p.rows % image.planes != 0)
      fail("normalized pixels must be float32 planes (CV_32FC1, rows = planes x height), got " + describe_pixels(p) +
           " with " + std::to_string(image.planes) + " planes");
  }
  if (!image.mask.empty()) {
    const cv::Mat& m = image.mask;
    if (m.channels() != 1 || !is_mask_depth(m.depth()))
      fail("the mask is " + describe_pixels(m) + "; a mask is one channel of class ids (uint8, uint16 or int32)");
    if (m.cols != image.width() || m.rows != image.height())
      fail("the mask is " + std::to_string(m.cols) + "x" + std::to_string(m.rows) + " but the image is " +
           std::to_string(image.width()) + "x" + std::to_string(image.height()));
  }
  if (!image.boxes.empty()) check_boxes(image.boxes, what + ": " + item_name(image));
  for (const auto& [key, target] : image.targets) {
    for (const std::int64_t d : target.shape)
      if (d < 0) fail("target '" + key + "' has a negative dimension");
    if (static_cast<std::int64_t>(target.values.size()) != target.elements())
      fail("target '" + key + "' has " + std::to_string(target.values.size()) + " values for a shape of " +
           std::to_string(target.elements()));
  }
}

}  // namespace stoke::nodes
