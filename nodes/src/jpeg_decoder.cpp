#include "jpeg_decoder.hpp"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/recycling_allocator.hpp"

// jpeglib.h needs FILE and size_t declared first; jerror.h needs jpeglib.h's configuration.
#include <jpeglib.h>
// (keep this order)
#include <jerror.h>

namespace stoke::nodes::detail {

namespace {

// Progressive JPEGs may hold any number of scans, each costing a pass over the coefficients: a
// tiny file can keep a core busy for minutes ("Two Issues with the JPEG Standard", libjpeg-turbo).
// TurboJPEG's TJPARAM_SCANLIMIT uses the same bound; real encoders write about 10.
constexpr int kMaxScans = 500;

// Rows handed to jpeg_read_scanlines per call. libjpeg returns at most one row group (up to 16
// rows at 4:2:0), so more would not be used.
constexpr int kRowsPerCall = 16;

// Warnings that mean the entropy-coded data or the file structure is damaged (the pixels are
// libjpeg's guess). Metadata warnings (JWRN_JFIF_MAJOR, JWRN_ADOBE_XFORM, JWRN_BOGUS_ICC, ...)
// leave the pixels intact and never fail a decode.
bool is_corrupt_data_warning(int code) {
  switch (code) {
    case JWRN_ARITH_BAD_CODE:
    case JWRN_BOGUS_PROGRESSION:
    case JWRN_EXTRANEOUS_DATA:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_JPEG_EOF:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
      return true;
    default:
      return false;
  }
}

// libjpeg reports errors through error_exit, which must not return (the default calls exit()),
// and warnings through emit_message. Both longjmp back to the phase function that was running,
// which returns false; JpegReader then throws. The phase functions below create no C++ object
// with a destructor, so the jump skips none.
struct Decompression {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr errors{};
  jpeg_progress_mgr progress{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX + 64] = {};
  bool strict = true;
  bool warning = false;  // the failure was a corrupt-data warning under `strict`
  bool created = false;

  Decompression() = default;
  Decompression(const Decompression&) = delete;
  Decompression& operator=(const Decompression&) = delete;
  ~Decompression() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

Decompression& state_of(j_common_ptr info) { return *static_cast<Decompression*>(info->client_data); }

[[noreturn]] void on_error(j_common_ptr info) {
  Decompression& s = state_of(info);
  (*info->err->format_message)(info, s.message);
  std::longjmp(s.jump, 1);
}

void on_message(j_common_ptr info, int level) {
  if (level >= 0) return;  // trace messages
  Decompression& s = state_of(info);
  ++info->err->num_warnings;
  if (s.strict && is_corrupt_data_warning(info->err->msg_code)) {
    (*info->err->format_message)(info, s.message);
    s.warning = true;
    std::longjmp(s.jump, 1);
  }
}

void on_progress(j_common_ptr info) {
  Decompression& s = state_of(info);
  if (s.cinfo.progressive_mode && s.cinfo.input_scan_number > kMaxScans) {
    std::snprintf(s.message, sizeof s.message, "progressive image with more than %d scans refused", kMaxScans);
    std::longjmp(s.jump, 1);
  }
}

// ---- phases: each sets the jump target, calls libjpeg, and returns false after a longjmp ----

bool read_header_phase(Decompression& s, const unsigned char* data, std::size_t size) {
  if (setjmp(s.jump)) return false;
  jpeg_create_decompress(&s.cinfo);
  s.created = true;
  s.cinfo.progress = &s.progress;
  jpeg_mem_src(&s.cinfo, data, static_cast<unsigned long>(size));  // NOLINT(google-runtime-int)
  if (jpeg_read_header(&s.cinfo, TRUE) != JPEG_HEADER_OK) {
    std::snprintf(s.message, sizeof s.message, "no image in the data (tables only)");
    return false;
  }
  return true;
}

bool start_phase(Decompression& s) {
  if (setjmp(s.jump)) return false;
  // For a progressive JPEG this consumes every scan into the coefficient buffer.
  jpeg_start_decompress(&s.cinfo);
  return true;
}

bool crop_phase(Decompression& s, JDIMENSION* xoffset, JDIMENSION* width) {
  if (setjmp(s.jump)) return false;
  jpeg_crop_scanline(&s.cinfo, xoffset, width);
  return true;
}

// R = (255 - C) * (255 - K) / 255, and likewise G from M and B from Y. Files with an Adobe APP14
// marker (all YCCK, and CMYK from Photoshop and libjpeg) store the four inks inverted, 255 = none.
void cmyk_to_rgb(const unsigned char* cmyk, unsigned char* rgb, JDIMENSION width, bool inverted) {
  for (JDIMENSION x = 0; x < width; ++x, cmyk += 4, rgb += 3) {
    const unsigned k = inverted ? cmyk[3] : 255U - cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const unsigned v = inverted ? cmyk[c] : 255U - cmyk[c];
      rgb[c] = static_cast<unsigned char>((v * k + 127U) / 255U);
    }
  }
}

// Skips `skip` rows, reads `rows` rows into dst (row stride `step`), then finishes (reading to
// EOI) or aborts. With `scratch` (CMYK output) rows land there first and are converted.
bool read_phase(Decompression& s, JDIMENSION skip, JDIMENSION rows, unsigned char* dst, std::size_t step,
                unsigned char* scratch, bool inverted, bool finish) {
  if (setjmp(s.jump)) return false;
  if (skip > 0 && jpeg_skip_scanlines(&s.cinfo, skip) != skip) {
    std::snprintf(s.message, sizeof s.message, "could not skip to row %u", static_cast<unsigned>(skip));
    return false;
  }
  const JDIMENSION width = s.cinfo.output_width;
  JDIMENSION done = 0;
  while (done < rows) {
    JSAMPROW targets[kRowsPerCall];
    const JDIMENSION n = std::min<JDIMENSION>(kRowsPerCall, rows - done);
    for (JDIMENSION i = 0; i < n; ++i) {
      targets[i] = scratch != nullptr ? scratch + std::size_t{i} * width * 4 : dst + (done + i) * step;
    }
    const JDIMENSION got = jpeg_read_scanlines(&s.cinfo, targets, n);
    if (got == 0) {
      std::snprintf(s.message, sizeof s.message, "no data for row %u", static_cast<unsigned>(skip + done));
      return false;
    }
    if (scratch != nullptr) {
      for (JDIMENSION i = 0; i < got; ++i) {
        cmyk_to_rgb(scratch + std::size_t{i} * width * 4, dst + (done + i) * step, width, inverted);
      }
    }
    done += got;
  }
  if (finish) {
    jpeg_finish_decompress(&s.cinfo);
  } else {
    jpeg_abort_decompress(&s.cinfo);
  }
  return true;
}

JpegColor color_of(J_COLOR_SPACE space) {
  switch (space) {
    case JCS_GRAYSCALE:
      return JpegColor::gray;
    case JCS_YCbCr:
      return JpegColor::ycc;
    case JCS_RGB:
      return JpegColor::rgb;
    case JCS_CMYK:
      return JpegColor::cmyk;
    case JCS_YCCK:
      return JpegColor::ycck;
    default:
      return JpegColor::other;
  }
}

}  // namespace

struct JpegReader::State : Decompression {};

cv::Size jpeg_scaled_size(cv::Size size, int m) noexcept {
  const auto up = [m](int v) { return static_cast<int>((static_cast<long long>(v) * m + 7) / 8); };
  return {up(size.width), up(size.height)};
}

JpegReader::JpegReader(std::span<const std::byte> bytes, const std::string& name, bool strict)
    : state_(std::make_unique<State>()), name_(name) {
  State& s = *state_;
  s.strict = strict;
  s.cinfo.err = jpeg_std_error(&s.errors);
  s.cinfo.client_data = static_cast<Decompression*>(&s);  // kept by jpeg_create_decompress
  s.errors.error_exit = on_error;
  s.errors.emit_message = on_message;
  s.progress.progress_monitor = on_progress;
  if (!read_header_phase(s, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size())) fail();
  header_.width = static_cast<int>(s.cinfo.image_width);
  header_.height = static_cast<int>(s.cinfo.image_height);
  header_.components = s.cinfo.num_components;
  header_.progressive = s.cinfo.progressive_mode != 0;
  header_.color = color_of(s.cinfo.jpeg_color_space);
  header_.adobe = s.cinfo.saw_Adobe_marker != 0;
  for (int c = 0; c < s.cinfo.num_components; ++c) {
    header_.max_h_samp = std::max(header_.max_h_samp, s.cinfo.comp_info[c].h_samp_factor);
    header_.max_v_samp = std::max(header_.max_v_samp, s.cinfo.comp_info[c].v_samp_factor);
  }
}

JpegReader::~JpegReader() = default;

void JpegReader::fail() const {
  std::string reason = std::string("JPEG: ") + state_->message;
  if (state_->warning) reason += " (corrupt data; DecodeOptions::strict = false decodes it anyway)";
  throw DecodeError(name_, reason);
}

cv::Mat JpegReader::read(int m, cv::Rect region) {
  if (m < 1 || m > 8) throw std::invalid_argument("JpegReader::read: scale must be 1..8 eighths");
  State& s = *state_;
  const bool cmyk = header_.color == JpegColor::cmyk || header_.color == JpegColor::ycck;
  s.cinfo.scale_num = static_cast<unsigned>(m);
  s.cinfo.scale_denom = 8;
  // The accurate IDCT: JDCT_IFAST measured only ~6% faster here (AVX2) and is less exact above
  // quality 90; ISLOW is also what PIL and torchvision decode with.
  s.cinfo.dct_method = JDCT_ISLOW;
  // Smooth chroma upsampling (the default) also keeps libjpeg off its merged upsampler, which
  // jpeg_skip_scanlines() has mishandled in several releases (CVE-2020-35538).
  s.cinfo.do_fancy_upsampling = TRUE;
  s.cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;  // libjpeg expands grayscale to RGB itself
  if (!start_phase(s)) fail();

  const cv::Rect all(0, 0, static_cast<int>(s.cinfo.output_width), static_cast<int>(s.cinfo.output_height));
  const bool whole = region.empty() || region == all;
  if (whole) region = all;
  if ((region & all) != region) {
    throw std::invalid_argument("JpegReader::read: region outside the " + std::to_string(all.width) + "x" +
                                std::to_string(all.height) + " scaled image");
  }

  // libjpeg-turbo 2.1.x miscomputes cropped widths for 4x2/2x4 sampling factors under scaling
  // (fixed in 3.0.0): for such rare layouts decode all rows from the top at full width and cut.
  const bool usual_sampling = header_.max_h_samp <= 2 && header_.max_v_samp <= 2;
  JDIMENSION xoffset = 0;
  JDIMENSION width = s.cinfo.output_width;
  JDIMENSION skip = 0;
  int first_row = 0;  // of `region`, in the matrix read
  if (!whole && usual_sampling) {
    skip = static_cast<JDIMENSION>(region.y);
    if (region.width < all.width) {
      // Moves xoffset left to an iMCU boundary and widens `width` to match.
      xoffset = static_cast<JDIMENSION>(region.x);
      width = static_cast<JDIMENSION>(region.width);
      if (!crop_phase(s, &xoffset, &width)) fail();
    }
  } else {
    first_row = region.y;
  }
  const int rows = first_row + region.height;

  cv::Mat out = recycled_mat();
  out.create(rows, static_cast<int>(width), CV_8UC3);
  std::vector<unsigned char> scratch(cmyk ? std::size_t{width} * 4 * kRowsPerCall : 0);
  if (!read_phase(s, skip, static_cast<JDIMENSION>(rows), out.data, out.step[0],
                  scratch.empty() ? nullptr : scratch.data(), header_.adobe, whole)) {
    fail();
  }
  if (whole) return out;
  const int left = region.x - static_cast<int>(xoffset);
  return out(cv::Rect(left, first_row, region.width, region.height));
}

}  // namespace stoke::nodes::detail
