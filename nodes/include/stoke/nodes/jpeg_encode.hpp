// JPEG encoding (libjpeg-turbo): what `stoke gen-shapes` and `stoke pack --resize` write.
#pragma once

#include <cstddef>
#include <opencv2/core/mat.hpp>
#include <vector>

namespace stoke::nodes {

/// Encodes an 8-bit RGB (CV_8UC3) or grayscale (CV_8UC1) image as a baseline JPEG of `quality`
/// (1..100, 4:2:0 chroma subsampling for colour). Throws std::invalid_argument for other types
/// and std::runtime_error when libjpeg fails.
std::vector<std::byte> encode_jpeg(const cv::Mat& image, int quality = 90);

}  // namespace stoke::nodes
