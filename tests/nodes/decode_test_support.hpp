// Helpers shared by the decode tests: samples from bytes, synthetic and real photos, hand-made
// JPEG variants (CMYK/YCCK via libjpeg, EXIF orientation), and image comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <opencv2/core.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoke/nodes/jpeg_encode.hpp"
#include "stoke/nodes/sample.hpp"

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

namespace stoke::nodes::test {

inline Sample make_sample(std::vector<std::byte> bytes, std::string name, std::uint64_t index = 0) {
  Sample sample;
  sample.bytes = Bytes(std::move(bytes));
  sample.name = std::move(name);
  sample.index = index;
  sample.label = static_cast<int>(index % 10);
  return sample;
}

/// Skips the current test when the real photos are not there.
#define STOKE_SKIP_WITHOUT_PHOTOS()                                                                    \
  if (!std::filesystem::is_directory(STOKE_TEST_PHOTOS_DIR)) {                                         \
    GTEST_SKIP() << "no photos at " STOKE_TEST_PHOTOS_DIR " (configure with -DSTOKE_TEST_PHOTOS_DIR)"; \
  }

/// The real photos (STOKE_TEST_PHOTOS_DIR), sorted by name.
inline std::vector<std::filesystem::path> photo_paths() {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(STOKE_TEST_PHOTOS_DIR)) {
    if (entry.path().extension() == ".jpg") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

/// A smooth RGB test picture with some detail and no symmetry: each quadrant has its own colour,
/// so flips and rotations are told apart.
inline cv::Mat test_picture(int width, int height) {
  cv::Mat image(height, width, CV_8UC3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const bool right = x >= width / 2;
      const bool bottom = y >= height / 2;
      const int base_r = right ? 200 : 40;
      const int base_g = bottom ? 190 : 50;
      const int base_b = right != bottom ? 180 : 60;
      const double wave = 25.0 * std::sin(x * 0.21) * std::cos(y * 0.17);
      image.at<cv::Vec3b>(y, x) =
          cv::Vec3b(cv::saturate_cast<uchar>(base_r + wave + 0.3 * x),
                    cv::saturate_cast<uchar>(base_g - wave + 0.2 * y), cv::saturate_cast<uchar>(base_b + wave));
    }
  }
  return image;
}

/// Largest per-channel mean absolute difference between two CV_8UC3 images of one size.
inline double max_channel_mad(const cv::Mat& a, const cv::Mat& b) {
  cv::Mat diff;
  cv::absdiff(a, b, diff);
  const cv::Scalar mad = cv::mean(diff);
  return std::max({mad[0], mad[1], mad[2]});
}

/// PSNR in dB (capped at 100 for identical images).
inline double psnr(const cv::Mat& a, const cv::Mat& b) { return std::min(100.0, cv::PSNR(a, b)); }

/// Returns `jpeg` with an APP1 Exif segment carrying Orientation = `orientation` inserted after
/// SOI, its TIFF structure in little- (`little`) or big-endian byte order.
inline std::vector<std::byte> with_exif_orientation(const std::vector<std::byte>& jpeg, int orientation,
                                                    bool little = true) {
  std::vector<unsigned char> tiff;
  const auto u16 = [&](unsigned v) {
    if (little) {
      tiff.push_back(v & 0xFF), tiff.push_back(v >> 8 & 0xFF);
    } else {
      tiff.push_back(v >> 8 & 0xFF), tiff.push_back(v & 0xFF);
    }
  };
  const auto u32 = [&](std::uint32_t v) {
    if (little) {
      u16(v & 0xFFFF), u16(v >> 16);
    } else {
      u16(v >> 16), u16(v & 0xFFFF);
    }
  };
  tiff.push_back(little ? 'I' : 'M');
  tiff.push_back(little ? 'I' : 'M');
  u16(42);
  u32(8);                                        // IFD0 right after the header
  u16(2);                                        // two entries: an unrelated one first, so the reader must walk the IFD
  u16(0x010F), u16(2), u32(4), u32(0x006F6F66);  // Make, ASCII "foo\0" inline
  u16(0x0112), u16(3), u32(1), u16(static_cast<unsigned>(orientation)), u16(0);
  u32(0);  // no next IFD
  const std::size_t length = 2 + 6 + tiff.size();
  std::vector<std::byte> out(jpeg.begin(), jpeg.begin() + 2);
  const int header[] = {0xFF, 0xE1, static_cast<int>(length >> 8), static_cast<int>(length & 0xFF), 'E', 'x', 'i', 'f',
                        0,    0};
  for (const int c : header) out.push_back(static_cast<std::byte>(c));
  for (const unsigned char c : tiff) out.push_back(static_cast<std::byte>(c));
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

/// Encodes CMYK samples (CV_8UC4, as they are to be stored) with libjpeg as a JPEG in `space`
/// (JCS_CMYK or JCS_YCCK). libjpeg writes an Adobe APP14 marker unless `adobe_marker` is false.
inline std::vector<std::byte> encode_cmyk(const cv::Mat& cmyk, J_COLOR_SPACE space, bool adobe_marker = true,
                                          int quality = 95) {
  struct Errors {
    jpeg_error_mgr pub;
    std::jmp_buf jump;
  };
  jpeg_compress_struct info{};
  Errors errors{};
  info.err = jpeg_std_error(&errors.pub);
  errors.pub.error_exit = [](j_common_ptr c) { std::longjmp(reinterpret_cast<Errors*>(c->err)->jump, 1); };
  unsigned char* out = nullptr;
  unsigned long out_size = 0;  // NOLINT(google-runtime-int): libjpeg's type
  if (setjmp(errors.jump)) {
    jpeg_destroy_compress(&info);
    std::free(out);
    throw std::runtime_error("encode_cmyk: libjpeg failed");
  }
  jpeg_create_compress(&info);
  jpeg_mem_dest(&info, &out, &out_size);
  info.image_width = static_cast<JDIMENSION>(cmyk.cols);
  info.image_height = static_cast<JDIMENSION>(cmyk.rows);
  info.input_components = 4;
  info.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&info);
  jpeg_set_colorspace(&info, space);
  info.write_Adobe_marker = adobe_marker ? TRUE : FALSE;
  jpeg_set_quality(&info, quality, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(cmyk.ptr<unsigned char>(static_cast<int>(info.next_scanline)));
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  const auto* begin = reinterpret_cast<const std::byte*>(out);
  std::vector<std::byte> bytes(begin, begin + out_size);
  std::free(out);
  return bytes;
}

/// RGB -> CMYK the naive way (K = 255 - max(R, G, B)), stored inverted as Adobe does when
/// `inverted` (255 = no ink). Decoding it back gives the RGB exactly up to rounding.
inline cv::Mat rgb_to_cmyk(const cv::Mat& rgb, bool inverted) {
  cv::Mat cmyk(rgb.size(), CV_8UC4);
  for (int y = 0; y < rgb.rows; ++y) {
    for (int x = 0; x < rgb.cols; ++x) {
      const cv::Vec3b p = rgb.at<cv::Vec3b>(y, x);
      const int maximum = std::max({p[0], p[1], p[2]});
      const int k = 255 - maximum;
      cv::Vec4b ink;
      for (int c = 0; c < 3; ++c)
        ink[c] = maximum == 0 ? 0 : static_cast<uchar>(255 - (p[c] * 255 + maximum / 2) / maximum);
      ink[3] = static_cast<uchar>(k);
      if (inverted) {
        for (int c = 0; c < 4; ++c) ink[c] = static_cast<uchar>(255 - ink[c]);
      }
      cmyk.at<cv::Vec4b>(y, x) = ink;
    }
  }
  return cmyk;
}

/// Offset of the first marker `code` (e.g. 0xC0 for SOF0) in a JPEG, walking its segments.
inline std::size_t find_marker(const std::vector<std::byte>& jpeg, unsigned code) {
  std::size_t pos = 2;
  while (pos + 4 <= jpeg.size()) {
    const auto marker = std::to_integer<unsigned>(jpeg[pos + 1]);
    if (marker == code) return pos;
    if (marker == 0xDA) break;
    pos += 2 + (std::to_integer<std::size_t>(jpeg[pos + 2]) << 8 | std::to_integer<std::size_t>(jpeg[pos + 3]));
  }
  throw std::runtime_error("find_marker: no such marker before SOS");
}

/// `jpeg` with its frame header (SOF0/SOF2) claiming `width` x `height`.
inline std::vector<std::byte> with_frame_size(std::vector<std::byte> jpeg, unsigned width, unsigned height) {
  std::size_t sof = 0;
  try {
    sof = find_marker(jpeg, 0xC0);
  } catch (const std::runtime_error&) {
    sof = find_marker(jpeg, 0xC2);
  }
  jpeg[sof + 5] = static_cast<std::byte>(height >> 8);
  jpeg[sof + 6] = static_cast<std::byte>(height & 0xFF);
  jpeg[sof + 7] = static_cast<std::byte>(width >> 8);
  jpeg[sof + 8] = static_cast<std::byte>(width & 0xFF);
  return jpeg;
}

}  // namespace stoke::nodes::test
