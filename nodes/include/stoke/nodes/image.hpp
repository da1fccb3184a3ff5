// Image: decoded pixels travelling from decode through augment to batch.
#pragma once

#include <cstdint>
#include <opencv2/core/mat.hpp>
#include <string>

namespace stoke::nodes {

/// How an Image's pixels are laid out.
enum class PixelLayout : std::uint8_t {
  hwc_u8,   ///< CV_8UC3, rows x cols = H x W, interleaved RGB (what decode produces)
  chw_f32,  ///< CV_32FC1 of (3*H) x W: three planes R, G, B, normalized (what Normalize produces)
};

/// Decoded pixels plus the identity of the item they came from. Always 3 channels, RGB order.
struct Image {
  cv::Mat pixels;
  PixelLayout layout = PixelLayout::hwc_u8;
  int label = -1;
  std::uint64_t index = 0;
  std::uint32_t epoch = 0;
  std::string name;

  int width() const noexcept { return pixels.cols; }
  int height() const noexcept { return layout == PixelLayout::hwc_u8 ? pixels.rows : pixels.rows / 3; }
};

}  // namespace stoke::nodes
