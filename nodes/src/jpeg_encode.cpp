#include "stoke/nodes/jpeg_encode.hpp"

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

// jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>

namespace stoke::nodes {

namespace {

// libjpeg reports errors through error_exit, which must not return; the default calls exit().
// We longjmp back to encode_jpeg, which turns the message into an exception. No C++ object with
// a destructor lives in the frames the jump crosses.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void on_error(j_common_ptr info) {
  auto* errors = reinterpret_cast<ErrorManager*>(info->err);
  (*info->err->format_message)(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// Owns the compressor and libjpeg's output buffer.
struct Compressor {
  jpeg_compress_struct info{};
  ErrorManager errors{};
  unsigned char* out = nullptr;
  unsigned long out_size = 0;  // NOLINT(google-runtime-int): libjpeg's type
  bool created = false;
  ~Compressor() {
    if (created) jpeg_destroy_compress(&info);
    std::free(out);
  }
};

// Returns an empty string on success, libjpeg's message on failure.
std::string compress(Compressor& c, const cv::Mat& image, int quality) {
  c.info.err = jpeg_std_error(&c.errors.pub);
  c.errors.pub.error_exit = on_error;
  if (setjmp(c.errors.jump)) return c.errors.message[0] ? c.errors.message : "libjpeg error";
  jpeg_create_compress(&c.info);
  c.created = true;
  jpeg_mem_dest(&c.info, &c.out, &c.out_size);
  c.info.image_width = static_cast<JDIMENSION>(image.cols);
  c.info.image_height = static_cast<JDIMENSION>(image.rows);
  c.info.input_components = image.channels();
  c.info.in_color_space = image.channels() == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&c.info);
  jpeg_set_quality(&c.info, quality, TRUE);
  jpeg_start_compress(&c.info, TRUE);
  while (c.info.next_scanline < c.info.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(image.ptr<unsigned char>(static_cast<int>(c.info.next_scanline)));
    jpeg_write_scanlines(&c.info, &row, 1);
  }
  jpeg_finish_compress(&c.info);
  return {};
}

}  // namespace

std::vector<std::byte> encode_jpeg(const cv::Mat& image, int quality) {
  if (image.empty() || image.depth() != CV_8U || (image.channels() != 3 && image.channels() != 1)) {
    throw std::invalid_argument("encode_jpeg: needs a non-empty 8-bit RGB or grayscale image");
  }
  if (quality < 1 || quality > 100) {
    throw std::invalid_argument("encode_jpeg: quality must be in 1..100, got " + std::to_string(quality));
  }
  Compressor c;
  if (auto error = compress(c, image, quality); !error.empty()) {
    throw std::runtime_error("encode_jpeg: " + error);
  }
  const auto* begin = reinterpret_cast<const std::byte*>(c.out);
  return std::vector<std::byte>(begin, begin + c.out_size);
}

}  // namespace stoke::nodes
