// opencv_codec: non-JPEG image formats for stoke's Decoder, through OpenCV's imgcodecs.
//
//   stoke::nodes::DecodeOptions options;
//   options.other_formats = stoke::nodes::opencv_codec();
//   stoke::nodes::Decoder decoder(options);
//
// Part of the optional target stoke::imgcodecs (link it; it exists when OpenCV's imgcodecs does).
#pragma once

#include "stoke/nodes/decode.hpp"

namespace stoke::nodes {

/// An OtherFormatDecoder backed by cv::imdecode: PNG, BMP, WebP, TIFF and PNM, and whatever
/// else the installed OpenCV reads (OpenCV 4.6, Debian 12's, reads no GIF). Returns CV_8UC3 RGB:
/// grayscale is expanded, alpha dropped, 16-bit samples scaled to 8 bits. EXIF orientation in
/// these formats is ignored (DecodeOptions::exif_orientation concerns JPEG). Throws DecodeError
/// naming the sample when OpenCV cannot decode the bytes.
///
/// Size limits: the Decoder checks the size in the header against DecodeOptions::max_pixels
/// before calling this, and the result after; OpenCV also refuses images over its own limit
/// (environment variable OPENCV_IO_MAX_IMAGE_PIXELS, default 2^30 pixels).
///
/// Thread-safe: cv::imdecode keeps no state between calls.
OtherFormatDecoder opencv_codec();

/// The same with a choice of result: DecodeColor::rgb is opencv_codec(); DecodeColor::keep
/// returns what the file holds (cv::IMREAD_UNCHANGED): grayscale as one channel, alpha kept,
/// 16-bit PNG and TIFF samples as uint16 and float TIFF as float32, colour in RGB(A) order. Use it
/// with DecodeOptions::color = DecodeColor::keep.
OtherFormatDecoder opencv_codec(DecodeColor color);

}  // namespace stoke::nodes
