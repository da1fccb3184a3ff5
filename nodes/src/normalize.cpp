#include "stoke/nodes/normalize.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace stoke::nodes {

namespace {

std::string format_triple(const std::array<float, 3>& values) {
  std::ostringstream out;
  out << values[0] << ',' << values[1] << ',' << values[2];
  return out.str();
}

}  // namespace

Normalize::Normalize(std::array<float, 3> mean, std::array<float, 3> stddev) : mean_(mean), stddev_(stddev) {
  static constexpr const char* channel[] = {"R", "G", "B"};
  for (int c = 0; c < 3; ++c) {
    if (!std::isfinite(mean[c])) {
      throw std::invalid_argument("normalize: mean must be finite, got " + format_triple(mean) + " (channel " +
                                  channel[c] + ")");
    }
    if (!(std::isfinite(stddev[c]) && stddev[c] > 0)) {
      throw std::invalid_argument("normalize: std must be finite and > 0, got " + format_triple(stddev) + " (channel " +
                                  channel[c] + ")");
    }
    for (int v = 0; v < 256; ++v) table_[c][v] = (static_cast<float>(v) / 255.0f - mean[c]) / stddev[c];
  }
}

std::string Normalize::describe() const {
  return "normalize mean=" + format_triple(mean_) + " std=" + format_triple(stddev_);
}

void Normalize::apply_impl(Image& image, ItemRng& /*rng*/) const {
  const cv::Mat& src = image.pixels;
  if (src.type() != CV_8UC3) {
    throw std::invalid_argument("normalize: expected an 8-bit 3-channel (CV_8UC3) image, got type " +
                                std::to_string(src.type()));
  }
  const int rows = src.rows;
  const int cols = src.cols;
  cv::Mat out(3 * rows, cols, CV_32FC1);
  const float* table_r = table_[0].data();
  const float* table_g = table_[1].data();
  const float* table_b = table_[2].data();
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* in = src.ptr<std::uint8_t>(y);
    float* __restrict out_r = out.ptr<float>(y);
    float* __restrict out_g = out.ptr<float>(rows + y);
    float* __restrict out_b = out.ptr<float>(2 * rows + y);
    for (int x = 0; x < cols; ++x) {
      out_r[x] = table_r[in[3 * x]];
      out_g[x] = table_g[in[3 * x + 1]];
      out_b[x] = table_b[in[3 * x + 2]];
    }
  }
  image.pixels = std::move(out);
  image.layout = PixelLayout::chw_f32;
}

}  // namespace stoke::nodes
