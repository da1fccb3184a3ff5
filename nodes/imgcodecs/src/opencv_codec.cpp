#include "stoke/nodes/opencv_codec.hpp"

#include <climits>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>

namespace stoke::nodes {

namespace {

cv::Mat decode_with_opencv(std::span<const std::byte> bytes, const std::string& name, DecodeColor color) {
  const std::string format(format_name(detect_format(bytes)));
  if (bytes.size() > static_cast<std::size_t>(INT_MAX)) {
    throw DecodeError(name, format + ": " + std::to_string(bytes.size()) + " bytes is more than OpenCV can take");
  }
  // A header over the caller's bytes, not a copy; imdecode only reads them.
  const cv::Mat buffer(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<std::byte*>(bytes.data()));
  const int flags = color == DecodeColor::keep ? cv::IMREAD_UNCHANGED : cv::IMREAD_COLOR | cv::IMREAD_IGNORE_ORIENTATION;
  cv::Mat bgr;
  try {
    bgr = cv::imdecode(buffer, flags);
  } catch (const cv::Exception& e) {
    throw DecodeError(name, format + ": OpenCV: " + e.what());
  }
  if (bgr.empty()) {
    throw DecodeError(name, format +
                                ": OpenCV could not decode it (damaged or truncated, or a format this OpenCV "
                                "build cannot read)");
  }
  if (bgr.channels() != 3 && bgr.channels() != 4) return bgr;  // grey (and grey + alpha): no order to change
  cv::Mat rgb;
  cv::cvtColor(bgr, rgb, bgr.channels() == 4 ? cv::COLOR_BGRA2RGBA : cv::COLOR_BGR2RGB);
  return rgb;
}

}  // namespace

OtherFormatDecoder opencv_codec() { return opencv_codec(DecodeColor::rgb); }

OtherFormatDecoder opencv_codec(DecodeColor color) {
  return [color](std::span<const std::byte> bytes, const std::string& name) {
    return decode_with_opencv(bytes, name, color);
  };
}

}  // namespace stoke::nodes
