#include "stoke/nodes/normalize.hpp"

#include <algorithm>
#include <utility>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <stdexcept>

#include "stoke/nodes/recycling_allocator.hpp"

namespace stoke::nodes {

namespace {

std::string format_list(const std::vector<float>& values) {
  std::ostringstream out;
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  return out.str();
}

/// The expression every path computes (see the header).
inline float normalized(float value, float range, float mean, float stddev) { return (value / range - mean) / stddev; }

/// Which entry of a per-channel list serves channel c.
inline std::size_t entry(const std::vector<float>& list, int c) {
  return list.size() == 1 ? 0 : static_cast<std::size_t>(c);
}

/// Converts the rows of `src` (HWC, `channels` interleaved, element type T) into the planes of
/// `out`: plane c is rows [c * rows, (c + 1) * rows).
template <class T>
void convert_rows(const cv::Mat& src, cv::Mat& out, float range, const std::vector<float>& mean,
                  const std::vector<float>& stddev) {
  const int rows = src.rows;
  const int cols = src.cols;
  const int channels = src.channels();
  for (int c = 0; c < channels; ++c) {
    const float m = mean[entry(mean, c)];
    const float s = stddev[entry(stddev, c)];
    for (int y = 0; y < rows; ++y) {
      const T* in = src.ptr<T>(y) + c;
      float* __restrict to = out.ptr<float>(c * rows + y);
      for (int x = 0; x < cols; ++x) to[x] = normalized(static_cast<float>(in[x * channels]), range, m, s);
    }
  }
}

}  // namespace

Normalize::Normalize(std::vector<float> mean, std::vector<float> stddev, float range)
    : mean_(std::move(mean)), stddev_(std::move(stddev)), range_(range) {
  if (mean_.empty()) throw std::invalid_argument("normalize: mean needs at least one value");
  if (stddev_.empty()) throw std::invalid_argument("normalize: std needs at least one value");
  for (std::size_t c = 0; c < mean_.size(); ++c)
    if (!std::isfinite(mean_[c]))
      throw std::invalid_argument("normalize: mean must be finite, got " + format_list(mean_) + " (channel " +
                                  std::to_string(c) + ")");
  for (std::size_t c = 0; c < stddev_.size(); ++c)
    if (!(std::isfinite(stddev_[c]) && stddev_[c] > 0))
      throw std::invalid_argument("normalize: std must be finite and > 0, got " + format_list(stddev_) + " (channel " +
                                  std::to_string(c) + ")");
  if (!(std::isfinite(range_) && range_ >= 0))
    throw std::invalid_argument("normalize: range must be finite and >= 0 (0: the pixel type's full scale), got " +
                                std::to_string(range_));
  const float u8_range = range_for(CV_8U);
  // A table per channel both lists give (one value serves every channel); images with more
  // channels than a longer list gives are refused (refuses()).
  const std::size_t listed = mean_.size() == 1    ? stddev_.size()
                             : stddev_.size() == 1 ? mean_.size()
                                                   : std::min(mean_.size(), stddev_.size());
  tables_.resize(listed);
  for (std::size_t c = 0; c < listed; ++c) {
    const float m = mean_[entry(mean_, static_cast<int>(c))];
    const float s = stddev_[entry(stddev_, static_cast<int>(c))];
    for (int v = 0; v < 256; ++v) tables_[c][static_cast<std::size_t>(v)] = normalized(static_cast<float>(v), u8_range, m, s);
  }
}

float Normalize::range_for(int cv_depth) const noexcept {
  if (range_ > 0) return range_;
  switch (cv_depth) {
    case CV_8U:
      return 255.0f;
    case CV_16U:
      return 65535.0f;
    case CV_16S:
      return 32767.0f;
    default:
      return 1.0f;
  }
}

std::string Normalize::describe() const {
  std::string text = "normalize mean=" + format_list(mean_) + " std=" + format_list(stddev_);
  if (range_ > 0) {
    std::ostringstream r;
    r << range_;
    text += " range=" + r.str();
  }
  return text;
}

std::string Normalize::refuses(const Image& image) const {
  if (std::string why = Transform::refuses(image); !why.empty()) return why;
  const int channels = image.channels();
  for (const auto* list : {&mean_, &stddev_}) {
    if (list->size() != 1 && static_cast<int>(list->size()) < channels)
      return std::string(list == &mean_ ? "mean" : "std") + " has " + std::to_string(list->size()) + " values for a " +
             std::to_string(channels) + "-channel image (" + item_name(image) +
             "): give one per channel, or one for all";
  }
  return {};
}

void Normalize::apply_impl(Image& image, ItemRng& /*rng*/) const {
  const int channels = image.pixels.channels();
  cv::Mat out = recycled_mat();  // a block a batched image gave back, not one faulted in afresh
  out.create(channels * image.pixels.rows, image.pixels.cols, CV_32FC1);
  write_planes(image, out.ptr<float>());
  image.pixels = std::move(out);
  image.layout = PixelLayout::chw_f32;
  image.planes = channels;
}

void Normalize::write_planes(const Image& image, float* planes) const {
  const cv::Mat& src = image.pixels;
  const int rows = src.rows;
  const int cols = src.cols;
  const int channels = src.channels();
  cv::Mat out(channels * rows, cols, CV_32FC1, planes);  // a view of the caller's memory
  switch (src.depth()) {
    case CV_8U: {
      const auto table = [&](int c) { return tables_[tables_.size() == 1 ? 0 : static_cast<std::size_t>(c)].data(); };
      if (channels == 3) {  // RGB, the common case: each input row read once
        const float* table_r = table(0);
        const float* table_g = table(1);
        const float* table_b = table(2);
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
        break;
      }
      for (int c = 0; c < channels; ++c) {
        const float* values = table(c);
        for (int y = 0; y < rows; ++y) {
          const std::uint8_t* in = src.ptr<std::uint8_t>(y) + c;
          float* __restrict to = out.ptr<float>(c * rows + y);
          for (int x = 0; x < cols; ++x) to[x] = values[in[x * channels]];
        }
      }
      break;
    }
    case CV_16U:
      convert_rows<std::uint16_t>(src, out, range_for(CV_16U), mean_, stddev_);
      break;
    case CV_16S:
      convert_rows<std::int16_t>(src, out, range_for(CV_16S), mean_, stddev_);
      break;
    case CV_32F:
      convert_rows<float>(src, out, range_for(CV_32F), mean_, stddev_);
      break;
    default:
      throw std::invalid_argument("normalize: " + item_name(image) + ": cannot take " + describe_pixels(src));
  }
}

}  // namespace stoke::nodes
