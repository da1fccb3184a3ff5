#include "stoke/nodes/color_jitter.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace stoke::nodes {

namespace {

constexpr double kLumaR = 0.299;
constexpr double kLumaG = 0.587;
constexpr double kLumaB = 0.114;

void check_input(const cv::Mat& rgb, const char* what, double factor) {
  if (rgb.type() != CV_8UC3) {
    throw std::invalid_argument(std::string(what) + ": expected an 8-bit 3-channel (CV_8UC3) image, got type " +
                                std::to_string(rgb.type()));
  }
  if (!(factor >= 0) || !std::isfinite(factor)) {
    std::ostringstream message;
    message << what << ": factor must be finite and >= 0, got " << factor;
    throw std::invalid_argument(message.str());
  }
}

/// v -> round_half_up(clamp(factor * v + offset, 0, 255)), applied to all three channels.
cv::Mat apply_affine_lut(const cv::Mat& rgb, double factor, double offset) {
  cv::Mat lut(1, 256, CV_8UC1);
  auto* entries = lut.ptr<std::uint8_t>();
  for (int v = 0; v < 256; ++v) {
    const double x = std::floor(factor * v + offset + 0.5);
    entries[v] = static_cast<std::uint8_t>(std::clamp(x, 0.0, 255.0));
  }
  cv::Mat out;
  cv::LUT(rgb, lut, out);
  return out;
}

std::string format_range(const std::optional<ColorJitter::Range>& range) {
  if (!range) return "off";
  std::ostringstream out;
  out << range->min << ':' << range->max;
  return out.str();
}

/// Validates one range; returns nullopt for the identity range (torchvision's None).
std::optional<ColorJitter::Range> checked(std::optional<ColorJitter::Range> range, const char* name, bool is_hue) {
  if (!range) return std::nullopt;
  const double lo = is_hue ? -0.5 : 0.0;
  const double hi = is_hue ? 0.5 : HUGE_VAL;
  if (!(range->min >= lo && range->min <= range->max && range->max <= hi && std::isfinite(range->max))) {
    std::ostringstream message;
    message << "color_jitter: " << name << " range must satisfy "
            << (is_hue ? "-0.5 <= min <= max <= 0.5" : "0 <= min <= max") << ", got " << range->min << ':'
            << range->max;
    throw std::invalid_argument(message.str());
  }
  const double identity = is_hue ? 0.0 : 1.0;
  if (range->min == identity && range->max == identity) return std::nullopt;
  return range;
}

/// torchvision's _check_input for a single number.
std::optional<ColorJitter::Range> strength(double value, const char* name, bool is_hue) {
  if (!(value >= 0 && value <= (is_hue ? 0.5 : HUGE_VAL)) || !std::isfinite(value)) {
    std::ostringstream message;
    message << "color_jitter: " << name << " must be " << (is_hue ? "in [0, 0.5]" : "finite and >= 0") << ", got "
            << value;
    throw std::invalid_argument(message.str());
  }
  if (is_hue) return ColorJitter::Range{-value, value};
  return ColorJitter::Range{std::max(0.0, 1.0 - value), 1.0 + value};
}

}  // namespace

cv::Mat adjust_brightness(const cv::Mat& rgb, double factor) {
  check_input(rgb, "adjust_brightness", factor);
  return apply_affine_lut(rgb, factor, 0.0);
}

cv::Mat adjust_contrast(const cv::Mat& rgb, double factor) {
  check_input(rgb, "adjust_contrast", factor);
  // The mean of the per-pixel luma equals the luma of the per-channel means.
  const cv::Scalar means = cv::mean(rgb);
  const double gray_mean = kLumaR * means[0] + kLumaG * means[1] + kLumaB * means[2];
  return apply_affine_lut(rgb, factor, (1.0 - factor) * gray_mean);
}

cv::Mat adjust_saturation(const cv::Mat& rgb, double factor) {
  check_input(rgb, "adjust_saturation", factor);
  // Three vectorized OpenCV passes are an order of magnitude faster than a per-pixel loop with
  // table lookups (which the compiler cannot vectorize).
  cv::Mat gray, gray_rgb, out;
  cv::cvtColor(rgb, gray, cv::COLOR_RGB2GRAY);
  cv::cvtColor(gray, gray_rgb, cv::COLOR_GRAY2RGB);
  cv::addWeighted(rgb, factor, gray_rgb, 1.0 - factor, 0.0, out);
  return out;
}

cv::Mat adjust_hue(const cv::Mat& rgb, double shift) {
  if (rgb.type() != CV_8UC3) {
    throw std::invalid_argument("adjust_hue: expected an 8-bit 3-channel (CV_8UC3) image, got type " +
                                std::to_string(rgb.type()));
  }
  if (!(shift >= -0.5 && shift <= 0.5)) {
    std::ostringstream message;
    message << "adjust_hue: shift must be in [-0.5, 0.5], got " << shift;
    throw std::invalid_argument(message.str());
  }
  // Float HSV (H in degrees): an 8-bit HSV round trip would lose colour even for a zero shift.
  cv::Mat hsv;
  rgb.convertTo(hsv, CV_32FC3, 1.0 / 255.0);
  cv::cvtColor(hsv, hsv, cv::COLOR_RGB2HSV);
  const auto degrees = static_cast<float>(shift * 360.0);
  for (int y = 0; y < hsv.rows; ++y) {
    auto* pixel = hsv.ptr<cv::Vec3f>(y);
    for (int x = 0; x < hsv.cols; ++x) {
      float h = pixel[x][0] + degrees;
      if (h < 0) h += 360.0f;
      if (h >= 360.0f) h -= 360.0f;
      pixel[x][0] = h;
    }
  }
  cv::cvtColor(hsv, hsv, cv::COLOR_HSV2RGB);
  cv::Mat out;
  hsv.convertTo(out, CV_8UC3, 255.0);
  return out;
}

ColorJitter::ColorJitter(double brightness, double contrast, double saturation, double hue)
    : ColorJitter(Ranges{strength(brightness, "brightness", false), strength(contrast, "contrast", false),
                         strength(saturation, "saturation", false), strength(hue, "hue", true)}) {}

ColorJitter::ColorJitter(Ranges ranges)
    : ranges_{checked(ranges.brightness, "brightness", false), checked(ranges.contrast, "contrast", false),
              checked(ranges.saturation, "saturation", false), checked(ranges.hue, "hue", true)} {}

std::string ColorJitter::describe() const {
  return "color_jitter brightness=" + format_range(ranges_.brightness) + " contrast=" + format_range(ranges_.contrast) +
         " saturation=" + format_range(ranges_.saturation) + " hue=" + format_range(ranges_.hue);
}

std::string ColorJitter::refuses(const Image& image) const {
  if (std::string why = Transform::refuses(image); !why.empty()) return why;
  if (image.pixels.type() != CV_8UC3)
    return "takes 8-bit RGB images, got " + describe_pixels(image.pixels) +
           " (colour jitter is for photos; leave it out for other data)";
  return {};
}

void ColorJitter::apply_impl(Image& image, ItemRng& rng) const {
  enum Step : int { brightness, contrast, saturation, hue };
  const std::array<const std::optional<Range>*, 4> ranges{&ranges_.brightness, &ranges_.contrast, &ranges_.saturation,
                                                          &ranges_.hue};
  std::array<int, 4> order{};
  int enabled = 0;
  for (int step = 0; step < 4; ++step) {
    if (ranges[step]->has_value()) order[enabled++] = step;
  }
  if (enabled == 0) return;
  for (int i = enabled - 1; i > 0; --i) {
    std::swap(order[i], order[rng.uniform_int(0, i)]);
  }
  std::array<double, 4> factor{};
  for (int step = 0; step < 4; ++step) {
    if (const auto& range = *ranges[step]) factor[step] = rng.uniform(range->min, range->max);
  }
  for (int i = 0; i < enabled; ++i) {
    const int step = order[i];
    switch (step) {
      case brightness:
        image.pixels = adjust_brightness(image.pixels, factor[step]);
        break;
      case contrast:
        image.pixels = adjust_contrast(image.pixels, factor[step]);
        break;
      case saturation:
        image.pixels = adjust_saturation(image.pixels, factor[step]);
        break;
      default:
        image.pixels = adjust_hue(image.pixels, factor[step]);
        break;
    }
  }
}

}  // namespace stoke::nodes
