// Private to stoke::nodes: one JPEG decode through libjpeg-turbo's libjpeg API, whole or a region
// of the image scaled by M/8, straight into the rows of a cv::Mat. decode.cpp builds the public
// Decoder on it; the tests use it to check the cropped/skipped path against a full decode.
#pragma once

#include <cstddef>
#include <memory>
#include <opencv2/core/mat.hpp>
#include <span>
#include <string>

namespace stoke::nodes::detail {

enum class JpegColor { gray, ycc, rgb, cmyk, ycck, other };

/// What jpeg_read_header found. Sizes are the stored (not EXIF-oriented) ones.
struct JpegHeader {
  int width = 0;
  int height = 0;
  int components = 0;
  bool progressive = false;
  JpegColor color = JpegColor::other;
  bool adobe = false;  ///< an Adobe APP14 marker: CMYK/YCCK samples are stored inverted
  int max_h_samp = 1;  ///< largest horizontal sampling factor (2 for 4:2:0 and 4:2:2)
  int max_v_samp = 1;
};

/// Size of the image decoded at scale M/8: libjpeg's ceil(size * M / 8).
cv::Size jpeg_scaled_size(cv::Size size, int m) noexcept;

/// One decode of one JPEG: the constructor reads the header, read() decodes once. Errors (libjpeg
/// errors, and corrupt-data warnings when `strict`) throw DecodeError(name, "JPEG: ..."). Not
/// copyable or movable; use from one thread at a time (a Decoder makes one per call). `bytes`
/// and `name` must outlive it.
class JpegReader {
 public:
  JpegReader(std::span<const std::byte> bytes, const std::string& name, bool strict);
  ~JpegReader();
  JpegReader(const JpegReader&) = delete;
  JpegReader& operator=(const JpegReader&) = delete;

  const JpegHeader& header() const noexcept { return header_; }

  /// Decodes the image scaled by `m`/8 (m = 1..8) to CV_8UC3 RGB: all of it when `region` is
  /// empty, else just `region` (pixels of the scaled image, inside it). A region decode skips the
  /// rows above it (jpeg_skip_scanlines), decodes only the iMCU columns it touches
  /// (jpeg_crop_scanline) and stops after its last row (jpeg_abort_decompress); the result is a
  /// view into a slightly wider matrix. A whole decode reads on to EOI so that strict mode sees
  /// damage anywhere. Callable once.
  cv::Mat read(int m, cv::Rect region = {});

 private:
  struct State;
  [[noreturn]] void fail() const;

  std::unique_ptr<State> state_;  // on the heap: libjpeg keeps pointers into it
  const std::string& name_;
  JpegHeader header_;
};

}  // namespace stoke::nodes::detail
