#include "stoke/nodes/resize.hpp"

#include <algorithm>
#include <opencv2/imgproc.hpp>
#include <stdexcept>
#include <vector>

#include "stoke/base/enum_names.hpp"
#include "stoke/nodes/recycling_allocator.hpp"

namespace stoke::nodes {

namespace {

constexpr base::EnumNames<Interpolation, 3> interpolation_names{
    {{{Interpolation::bilinear, "bilinear"}, {Interpolation::area, "area"}, {Interpolation::nearest, "nearest"}}}};

}  // namespace

std::string_view to_string(Interpolation interpolation) noexcept {
  return interpolation_names.name(interpolation, "bilinear");
}

Interpolation parse_interpolation(std::string_view text, std::string_view what) {
  if (const auto interpolation = interpolation_names.find(text)) return *interpolation;
  throw std::invalid_argument(std::string(what) + ": interpolation must be " + interpolation_names.choices() +
                              ", got '" + std::string(text) + "'");
}

cv::Mat resize_pixels(const cv::Mat& src, cv::Size out, Interpolation interpolation) {
  if (src.empty()) throw std::invalid_argument("resize_pixels: empty source image");
  if (out.width <= 0 || out.height <= 0) {
    throw std::invalid_argument("resize_pixels: output size must be positive, got " + std::to_string(out.width) + "x" +
                                std::to_string(out.height));
  }
  if (src.size() == out) {
    cv::Mat copy = recycled_mat();
    src.copyTo(copy);
    return copy;
  }
  const bool shrinking = out.width <= src.cols && out.height <= src.rows;
  int flag = cv::INTER_LINEAR;
  switch (interpolation) {
    case Interpolation::bilinear:
      if (shrinking && (src.cols >= 2 * out.width || src.rows >= 2 * out.height)) flag = cv::INTER_AREA;
      break;
    case Interpolation::area:
      if (shrinking) flag = cv::INTER_AREA;
      break;
    case Interpolation::nearest:
      flag = cv::INTER_NEAREST;
      break;
  }
  if (src.channels() <= 4) {
    cv::Mat dst = recycled_mat();
    cv::resize(src, dst, out, 0, 0, flag);
    return dst;
  }
  // OpenCV's area resampling takes at most 4 channels: wider images (multispectral bands) go
  // through in groups of 4 and are put back together, channel order kept.
  std::vector<cv::Mat> groups;
  for (int first = 0; first < src.channels(); first += 4) {
    const int n = std::min(4, src.channels() - first);
    cv::Mat group(src.size(), CV_MAKETYPE(src.depth(), n));
    std::vector<int> from_to;
    for (int k = 0; k < n; ++k) from_to.insert(from_to.end(), {first + k, k});
    cv::mixChannels(&src, 1, &group, 1, from_to.data(), static_cast<std::size_t>(n));
    cv::Mat resized;
    cv::resize(group, resized, out, 0, 0, flag);
    groups.push_back(std::move(resized));
  }
  cv::Mat dst = recycled_mat();
  cv::merge(groups, dst);
  return dst;
}

cv::Mat resize_mask(const cv::Mat& mask, cv::Size out) {
  if (mask.empty()) throw std::invalid_argument("resize_mask: empty mask");
  if (out.width <= 0 || out.height <= 0) {
    throw std::invalid_argument("resize_mask: output size must be positive, got " + std::to_string(out.width) + "x" +
                                std::to_string(out.height));
  }
  if (mask.size() == out) return mask.clone();
  cv::Mat dst;
  cv::resize(mask, dst, out, 0, 0, cv::INTER_NEAREST_EXACT);
  return dst;
}

void crop_resize_fields(Image& image, cv::Rect crop, cv::Size out, Interpolation interpolation) {
  image.pixels = resize_pixels(image.pixels(crop), out, interpolation);
  if (!image.mask.empty()) image.mask = resize_mask(image.mask(crop), out);
  crop_resize_boxes(image.boxes, crop, out);
}

Resize::Resize(int shorter_side, Interpolation interpolation)
    : shorter_side_(shorter_side), interpolation_(interpolation) {
  if (shorter_side <= 0) {
    throw std::invalid_argument("resize: size must be positive, got " + std::to_string(shorter_side));
  }
}

Resize::Resize(cv::Size size, Interpolation interpolation) : exact_(size), interpolation_(interpolation) {
  if (size.width <= 0 || size.height <= 0) {
    throw std::invalid_argument("resize: size must be positive, got " + std::to_string(size.width) + "x" +
                                std::to_string(size.height));
  }
}

std::string Resize::describe() const {
  const std::string size = shorter_side_ > 0 ? std::to_string(shorter_side_)
                                             : std::to_string(exact_.width) + "x" + std::to_string(exact_.height);
  return "resize size=" + size + " interpolation=" + std::string(to_string(interpolation_));
}

cv::Size Resize::output_size(cv::Size source) const {
  if (shorter_side_ == 0) return exact_;
  // torchvision: new_long = int(size * long / short), the division in double, truncated.
  const bool portrait = source.width <= source.height;
  const int shorter = portrait ? source.width : source.height;
  const int longer = portrait ? source.height : source.width;
  const double scaled = static_cast<double>(shorter_side_) * static_cast<double>(longer) / static_cast<double>(shorter);
  if (scaled >= 1 << 30) {
    throw std::invalid_argument("resize: output for a " + std::to_string(source.width) + "x" +
                                std::to_string(source.height) + " image would be too large");
  }
  const int new_long = static_cast<int>(scaled);
  return portrait ? cv::Size(shorter_side_, new_long) : cv::Size(new_long, shorter_side_);
}

std::optional<Region> Resize::plan(cv::Size source, ItemRng& /*rng*/) const {
  if (source.width <= 0 || source.height <= 0) return std::nullopt;
  return Region{cv::Rect(0, 0, source.width, source.height), output_size(source)};
}

void Resize::apply_impl(Image& image, ItemRng& /*rng*/) const {
  const cv::Size size = image.pixels.size();
  crop_resize_fields(image, cv::Rect(0, 0, size.width, size.height), output_size(size), interpolation_);
}

}  // namespace stoke::nodes
