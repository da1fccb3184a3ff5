#include "stoke/nodes/random_resized_crop.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace stoke::nodes {

namespace {

std::string format_range(RandomResizedCrop::Range range) {
  std::ostringstream out;
  out << range.min << ':' << range.max;
  return out.str();
}

/// Python's int(round(x)): round half to even (std::nearbyint in the default rounding mode).
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }

}  // namespace

RandomResizedCrop::RandomResizedCrop(cv::Size size, Range scale, Range ratio, Interpolation interpolation)
    : size_(size), scale_(scale), ratio_(ratio), interpolation_(interpolation) {
  if (size.width <= 0 || size.height <= 0) {
    throw std::invalid_argument("random_resized_crop: size must be positive, got " + std::to_string(size.width) + "x" +
                                std::to_string(size.height));
  }
  if (!(scale.min > 0 && scale.min <= scale.max && scale.max <= 1)) {
    throw std::invalid_argument("random_resized_crop: scale must satisfy 0 < min <= max <= 1, got " +
                                format_range(scale));
  }
  if (!(ratio.min > 0 && ratio.min <= ratio.max && std::isfinite(ratio.max))) {
    throw std::invalid_argument("random_resized_crop: ratio must satisfy 0 < min <= max (width / height), got " +
                                format_range(ratio));
  }
}

std::string RandomResizedCrop::describe() const {
  return "random_resized_crop size=" + std::to_string(size_.width) + "x" + std::to_string(size_.height) +
         " scale=" + format_range(scale_) + " ratio=" + format_range(ratio_) +
         " interpolation=" + std::string(to_string(interpolation_));
}

cv::Rect RandomResizedCrop::crop_for(cv::Size source, ItemRng& rng) const {
  const int width = source.width;
  const int height = source.height;
  if (width <= 0 || height <= 0) {
    throw std::invalid_argument("random_resized_crop: empty source image (" + std::to_string(width) + "x" +
                                std::to_string(height) + ")");
  }
  const double area = static_cast<double>(width) * static_cast<double>(height);
  const double log_min = std::log(ratio_.min);
  const double log_max = std::log(ratio_.max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(scale_.min, scale_.max);
    const double aspect = std::exp(rng.uniform(log_min, log_max));
    const double w = std::nearbyint(std::sqrt(target_area * aspect));
    const double h = std::nearbyint(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int cw = static_cast<int>(w);
      const int ch = static_cast<int>(h);
      const auto top = static_cast<int>(rng.uniform_int(0, height - ch));
      const auto left = static_cast<int>(rng.uniform_int(0, width - cw));
      return {left, top, cw, ch};
    }
  }
  // Fallback: central crop, aspect ratio clamped into the range. torchvision could produce a
  // zero-sized side here for extreme ratios; it is kept at least 1 pixel.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int w = width;
  int h = height;
  if (in_ratio < ratio_.min) {
    h = std::clamp(round_half_even(w / ratio_.min), 1, height);
  } else if (in_ratio > ratio_.max) {
    w = std::clamp(round_half_even(h * ratio_.max), 1, width);
  }
  return {(width - w) / 2, (height - h) / 2, w, h};
}

std::optional<Region> RandomResizedCrop::plan(cv::Size source, ItemRng& rng) const {
  return Region{crop_for(source, rng), size_};
}

void RandomResizedCrop::apply_impl(Image& image, ItemRng& rng) const {
  const Region region = *plan(image.pixels.size(), rng);
  crop_resize_fields(image, region.crop, region.out, interpolation_);
}

}  // namespace stoke::nodes
