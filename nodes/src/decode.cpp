#include "stoke/nodes/decode.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

#include "exif.hpp"
#include "jpeg_decoder.hpp"
#include "stoke/nodes/recycling_allocator.hpp"
#include "stoke/nodes/resize.hpp"

namespace stoke::nodes {

namespace {

std::uint32_t byte_at(std::span<const std::byte> s, std::size_t i) { return std::to_integer<std::uint32_t>(s[i]); }

bool starts_with(std::span<const std::byte> bytes, std::string_view magic) {
  if (bytes.size() < magic.size()) return false;
  for (std::size_t i = 0; i < magic.size(); ++i) {
    if (byte_at(bytes, i) != static_cast<unsigned char>(magic[i])) return false;
  }
  return true;
}

bool is_space(std::uint32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string size_text(std::uint64_t width, std::uint64_t height) {
  return std::to_string(width) + "x" + std::to_string(height);
}

// ---- header sizes of the formats other_formats decodes -----------------------------------------

std::uint32_t le16(std::span<const std::byte> s, std::size_t at) { return byte_at(s, at) | byte_at(s, at + 1) << 8; }
std::uint32_t le32(std::span<const std::byte> s, std::size_t at) { return le16(s, at) | le16(s, at + 2) << 16; }
std::uint32_t be32(std::span<const std::byte> s, std::size_t at) {
  return byte_at(s, at) << 24 | byte_at(s, at + 1) << 16 | byte_at(s, at + 2) << 8 | byte_at(s, at + 3);
}

struct Dimensions {
  std::uint64_t width;
  std::uint64_t height;
};

// PNM: "P<n>", then width and height as ASCII decimals separated by whitespace and # comments.
std::optional<Dimensions> pnm_size(std::span<const std::byte> b) {
  std::size_t pos = 2;
  std::array<std::uint64_t, 2> values{};
  for (auto& value : values) {
    while (pos < b.size() && (is_space(byte_at(b, pos)) || byte_at(b, pos) == '#')) {
      if (byte_at(b, pos) == '#') {
        while (pos < b.size() && byte_at(b, pos) != '\n') ++pos;
      } else {
        ++pos;
      }
    }
    std::size_t digits = 0;
    while (pos < b.size() && byte_at(b, pos) >= '0' && byte_at(b, pos) <= '9' && digits < 9) {  // < 2^30
      value = value * 10 + (byte_at(b, pos) - '0');
      ++pos;
      ++digits;
    }
    if (digits == 0) return std::nullopt;
  }
  return Dimensions{values[0], values[1]};
}

// The size a PNG, GIF, BMP, WebP, TIFF or PNM header declares; nullopt when it cannot be read
// (P7 PAM, a truncated header, an unusual layout): the decoded result is checked instead.
std::optional<Dimensions> header_size(std::span<const std::byte> b, ImageFormat format) {
  switch (format) {
    case ImageFormat::png:  // signature, then the IHDR chunk: length, "IHDR", width, height
      if (b.size() >= 24 && starts_with(b.subspan(12), "IHDR")) return Dimensions{be32(b, 16), be32(b, 20)};
      return std::nullopt;
    case ImageFormat::gif:  // logical screen size
      if (b.size() >= 10) return Dimensions{le16(b, 6), le16(b, 8)};
      return std::nullopt;
    case ImageFormat::bmp: {
      if (b.size() < 26) return std::nullopt;
      if (le32(b, 14) == 12) return Dimensions{le16(b, 18), le16(b, 20)};  // OS/2 BITMAPCOREHEADER
      const auto width = static_cast<std::int32_t>(le32(b, 18));
      const auto height = static_cast<std::int32_t>(le32(b, 22));  // negative: stored top-down
      const auto magnitude = [](std::int32_t v) {
        return v < 0 ? -static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
      };
      return Dimensions{magnitude(width), magnitude(height)};
    }
    case ImageFormat::webp:
      if (b.size() >= 30 && starts_with(b.subspan(12), "VP8 ")) {  // lossy: frame header after a start code
        return Dimensions{le16(b, 26) & 0x3FFFU, le16(b, 28) & 0x3FFFU};
      }
      if (b.size() >= 25 && starts_with(b.subspan(12), "VP8L")) {  // lossless: 14-bit width-1, height-1
        const std::uint32_t bits = le32(b, 21);
        return Dimensions{(bits & 0x3FFFU) + 1, ((bits >> 14) & 0x3FFFU) + 1};
      }
      if (b.size() >= 30 && starts_with(b.subspan(12), "VP8X")) {  // extended: 24-bit canvas width-1, height-1
        const auto le24 = [&](std::size_t at) {
          return byte_at(b, at) | byte_at(b, at + 1) << 8 | byte_at(b, at + 2) << 16;
        };
        return Dimensions{std::uint64_t{le24(24)} + 1, std::uint64_t{le24(27)} + 1};
      }
      return std::nullopt;
    case ImageFormat::tiff:
      if (const auto tags = detail::read_tiff_ifd0(b); tags && tags->width && tags->height) {
        return Dimensions{*tags->width, *tags->height};
      }
      return std::nullopt;
    case ImageFormat::pnm:
      if (b.size() >= 2 && byte_at(b, 1) != '7') return pnm_size(b);
      return std::nullopt;
    case ImageFormat::dicom:  // Rows and Columns sit somewhere in the data set: other_formats decodes
    case ImageFormat::jpeg:
    case ImageFormat::unknown:
      return std::nullopt;
  }
  return std::nullopt;
}

// ---- EXIF orientation ----------------------------------------------------------------------------

// Orientations 5..8 swap width and height.
bool transposes(int orientation) { return orientation >= 5; }

// The stored image -> the upright one (EXIF 2.32, tag 0x0112).
cv::Mat orient(cv::Mat stored, int orientation) {
  if (orientation <= 1 || orientation > 8) return stored;
  cv::Mat out = recycled_mat();
  switch (orientation) {
    case 2:  // mirrored horizontally
      cv::flip(stored, out, 1);
      return out;
    case 3:  // rotated 180 degrees
      cv::flip(stored, out, -1);
      return out;
    case 4:  // mirrored vertically
      cv::flip(stored, out, 0);
      return out;
    default:
      break;
  }
  cv::Mat transposed = recycled_mat();
  cv::transpose(stored, transposed);
  switch (orientation) {
    case 5:  // transposed
      return transposed;
    case 6:  // stored rotated 90 degrees counter-clockwise: turn it clockwise
      cv::flip(transposed, out, 1);
      return out;
    case 7:  // transversed
      cv::flip(transposed, out, -1);
      return out;
    default:  // 8: stored rotated 90 degrees clockwise: turn it counter-clockwise
      cv::flip(transposed, out, 0);
      return out;
  }
}

// A rectangle of the upright image -> the same pixels' rectangle in the stored image (W x H).
cv::Rect to_stored(const cv::Rect& r, int orientation, cv::Size stored) {
  const int W = stored.width;
  const int H = stored.height;
  switch (orientation) {
    case 2:
      return {W - r.x - r.width, r.y, r.width, r.height};
    case 3:
      return {W - r.x - r.width, H - r.y - r.height, r.width, r.height};
    case 4:
      return {r.x, H - r.y - r.height, r.width, r.height};
    case 5:
      return {r.y, r.x, r.height, r.width};
    case 6:
      return {r.y, H - r.x - r.width, r.height, r.width};
    case 7:
      return {W - r.y - r.height, H - r.x - r.width, r.height, r.width};
    case 8:
      return {W - r.y - r.height, r.x, r.height, r.width};
    default:
      return r;
  }
}

// ---- fused decode-and-crop -------------------------------------------------------------------------

// The smallest DCT scale m/8 at which the crop is still at least `out` large in both directions,
// so that no detail the output can show is lost. Only 1/8, 1/4 and 1/2: libjpeg-turbo has SIMD
// IDCTs for those (and for 4:2:0 chroma at twice them); its 3/8, 5/8, 6/8 and 7/8 IDCTs are plain
// C and measured slower than decoding the crop at full scale (decode_fused_bench, ImageNet-like
// images: fused/plain time 1.04 with all eighths, 0.76 with powers of two), and no closer to it.
int dct_scale(cv::Size crop, cv::Size out) {
  for (const int m : {1, 2, 4}) {
    if (static_cast<std::int64_t>(crop.width) * m >= std::int64_t{out.width} * 8 &&
        static_cast<std::int64_t>(crop.height) * m >= std::int64_t{out.height} * 8) {
      return m;
    }
  }
  return 8;
}

// The smallest rectangle of whole pixels of the image scaled by m/8 (of size `scaled`) that covers
// `crop` (full-resolution pixels).
cv::Rect scaled_cover(const cv::Rect& crop, int m, cv::Size scaled) {
  const auto floor8 = [m](int v) { return static_cast<int>(static_cast<std::int64_t>(v) * m / 8); };
  const auto ceil8 = [m](int v) { return static_cast<int>((static_cast<std::int64_t>(v) * m + 7) / 8); };
  const int x0 = std::min(floor8(crop.x), scaled.width - 1);
  const int y0 = std::min(floor8(crop.y), scaled.height - 1);
  const int x1 = std::clamp(ceil8(crop.x + crop.width), x0 + 1, scaled.width);
  const int y1 = std::clamp(ceil8(crop.y + crop.height), y0 + 1, scaled.height);
  return {x0, y0, x1 - x0, y1 - y0};
}

// One axis of an area resampling: output i is the mean of the input over [a + i s, a + (i + 1) s),
// s = (b - a) / n, each input pixel j (covering [j, j + 1)) weighted by its overlap.
struct AreaTaps {
  std::vector<int> first;      // first input pixel of output i
  std::vector<int> count;      // number of input pixels of output i
  std::vector<float> weights;  // all outputs' weights, in order; each output's sum to 1
};

AreaTaps area_taps(double a, double b, int n, int limit) {
  AreaTaps taps;
  const double s = (b - a) / n;
  for (int i = 0; i < n; ++i) {
    const double lo = a + i * s;
    const double hi = lo + s;
    const int j0 = std::clamp(static_cast<int>(std::floor(lo)), 0, limit - 1);
    const int j1 = std::clamp(static_cast<int>(std::ceil(hi)), j0 + 1, limit);
    double total = 0;
    const std::size_t at = taps.weights.size();
    for (int j = j0; j < j1; ++j) {
      const double w = std::max(0.0, std::min(hi, j + 1.0) - std::max(lo, static_cast<double>(j)));
      taps.weights.push_back(static_cast<float>(w));
      total += w;
    }
    for (std::size_t k = at; k < taps.weights.size(); ++k) {
      taps.weights[k] = static_cast<float>(total > 0 ? static_cast<double>(taps.weights[k]) / total : 1.0 / (j1 - j0));
    }
    taps.first.push_back(j0);
    taps.count.push_back(j1 - j0);
  }
  return taps;
}

// Area-averages the window [x0, x1) x [y0, y1) of CV_8UC3 `src` (continuous pixel coordinates) to
// `out`: cv::INTER_AREA's filter, but with the window's edges anywhere, not on pixel boundaries.
cv::Mat resample_area(const cv::Mat& src, double x0, double y0, double x1, double y1, cv::Size out) {
  const AreaTaps across = area_taps(x0, x1, out.width, src.cols);
  const AreaTaps down = area_taps(y0, y1, out.height, src.rows);
  const int row0 = down.first.front();
  const int row1 = down.first.back() + down.count.back();
  cv::Mat rows = recycled_mat();  // horizontally resampled input rows
  rows.create(row1 - row0, out.width, CV_32FC3);
  for (int y = row0; y < row1; ++y) {
    const auto* in = src.ptr<std::uint8_t>(y);
    auto* to = rows.ptr<float>(y - row0);
    const float* w = across.weights.data();
    for (int i = 0; i < out.width; ++i) {
      float r = 0;
      float g = 0;
      float b = 0;
      for (const std::uint8_t* p = in + 3 * across.first[i]; p != in + 3 * (across.first[i] + across.count[i]);
           p += 3, ++w) {
        r += *w * p[0];
        g += *w * p[1];
        b += *w * p[2];
      }
      to[3 * i] = r;
      to[3 * i + 1] = g;
      to[3 * i + 2] = b;
    }
  }
  cv::Mat result = recycled_mat();
  result.create(out, CV_8UC3);
  std::vector<float> sum(static_cast<std::size_t>(out.width) * 3);
  const float* w = down.weights.data();
  for (int v = 0; v < out.height; ++v) {
    std::fill(sum.begin(), sum.end(), 0.0F);
    for (int k = 0; k < down.count[v]; ++k, ++w) {
      const float* row = rows.ptr<float>(down.first[v] + k - row0);
      for (std::size_t x = 0; x < sum.size(); ++x) sum[x] += *w * row[x];
    }
    auto* to = result.ptr<std::uint8_t>(v);
    for (std::size_t x = 0; x < sum.size(); ++x) to[x] = cv::saturate_cast<std::uint8_t>(sum[x]);
  }
  return result;
}

// Continuous coordinates of the upright image -> the stored image's (W x H): (X, Y) = A (X', Y', 1).
// Pixel (i, j) covers [i, i + 1) x [j, j + 1) in both.
cv::Matx23d upright_to_stored(int orientation, cv::Size stored) {
  const double W = stored.width;
  const double H = stored.height;
  switch (orientation) {
    case 2:
      return {-1, 0, W, 0, 1, 0};
    case 3:
      return {-1, 0, W, 0, -1, H};
    case 4:
      return {1, 0, 0, 0, -1, H};
    case 5:
      return {0, 1, 0, 1, 0, 0};
    case 6:
      return {0, 1, 0, -1, 0, H};
    case 7:
      return {0, -1, W, -1, 0, H};
    case 8:
      return {0, -1, W, 1, 0, 0};
    default:
      return {1, 0, 0, 0, 1, 0};
  }
}

// Resamples `part` -- pixels [part_rect] of the stored image scaled by m/8 -- so that output pixel
// (u, v) shows the point of the upright image at the centre of the output grid laid over `crop`:
// the same geometry as cv::resize of the full-resolution crop, without rounding the crop's edges
// to the coarser scaled grid (which alone would shift the output by up to half a pixel). Bilinear
// is enough here: the caller only comes here when DCT scaling left less than a 2x reduction.
cv::Mat resample_exact(const cv::Mat& part, const cv::Rect& part_rect, double f, const Region& region, int orientation,
                       cv::Size stored) {
  const cv::Rect& c = region.crop;
  const double sx = static_cast<double>(c.width) / region.out.width;
  const double sy = static_cast<double>(c.height) / region.out.height;
  const cv::Matx23d a = upright_to_stored(orientation, stored);
  // (X', Y') = (sx u + c.x + sx/2, sy v + c.y + sy/2); then (X, Y) = a (X', Y', 1); then the
  // part's pixel-centre coordinates are f X - 1/2 - part_rect.x and f Y - 1/2 - part_rect.y.
  const double bx = c.x + 0.5 * sx;
  const double by = c.y + 0.5 * sy;
  const cv::Matx23d map(f * a(0, 0) * sx, f * a(0, 1) * sy,
                        f * (a(0, 0) * bx + a(0, 1) * by + a(0, 2)) - 0.5 - part_rect.x, f * a(1, 0) * sx,
                        f * a(1, 1) * sy, f * (a(1, 0) * bx + a(1, 1) * by + a(1, 2)) - 0.5 - part_rect.y);
  cv::Mat out = recycled_mat();
  cv::warpAffine(part, out, map, region.out, cv::INTER_LINEAR | cv::WARP_INVERSE_MAP, cv::BORDER_REPLICATE);
  return out;
}

void check_region(const Region& region, cv::Size image, const std::string& name) {
  const cv::Rect& c = region.crop;
  if (c.width <= 0 || c.height <= 0 || (c & cv::Rect(0, 0, image.width, image.height)) != c || region.out.width <= 0 ||
      region.out.height <= 0) {
    throw std::invalid_argument(name + ": cannot decode the region crop=" + size_text(c.width, c.height) + "+" +
                                std::to_string(c.x) + "+" + std::to_string(c.y) +
                                " out=" + size_text(region.out.width, region.out.height) +
                                ": the crop must be non-empty and inside the " + size_text(image.width, image.height) +
                                " image (upright, after EXIF orientation), the output size positive");
  }
}

std::string hex_prefix(std::span<const std::byte> bytes) {
  std::string text;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%02x", byte_at(bytes, i));
    if (!text.empty()) text += ' ';
    text += hex;
  }
  return text;
}

// What DecodeColor::rgb makes of another decoder's pixels that are not CV_8UC3 (a decoder that
// keeps what files hold serves both colours): grey expanded, alpha dropped, 16 bits scaled to 8
// (as OpenCV's IMREAD_COLOR does: the high byte). Signed and float values have no 8-bit RGB.
cv::Mat to_rgb8(const cv::Mat& pixels, const std::string& format_text, const std::string& name) {
  const int channels = pixels.channels();
  if ((pixels.depth() != CV_8U && pixels.depth() != CV_16U) || (channels != 1 && channels != 3 && channels != 4)) {
    throw DecodeError(name, format_text + ": the other_formats decoder returned " + describe_pixels(pixels) +
                                ", which has no 8-bit RGB; DecodeOptions::color = DecodeColor::keep takes images as "
                                "they are");
  }
  cv::Mat eight = pixels;
  if (pixels.depth() == CV_16U) pixels.convertTo(eight, CV_8U, 1.0 / 256);
  if (channels == 3) return eight;
  cv::Mat rgb;
  cv::cvtColor(eight, rgb, channels == 1 ? cv::COLOR_GRAY2RGB : cv::COLOR_RGBA2RGB);
  return rgb;
}

}  // namespace

// ---- public functions --------------------------------------------------------------------------

ImageFormat detect_format(std::span<const std::byte> b) noexcept {
  // First: a DICOM preamble is free-form, and some hold a TIFF header (pydicom's CT_small.dcm).
  if (b.size() >= 132 && starts_with(b.subspan(128), "DICM")) return ImageFormat::dicom;
  if (b.size() >= 3 && byte_at(b, 0) == 0xFF && byte_at(b, 1) == 0xD8 && byte_at(b, 2) == 0xFF) {
    return ImageFormat::jpeg;
  }
  if (starts_with(b, "\x89PNG\r\n\x1a\n")) return ImageFormat::png;
  if (starts_with(b, "GIF87a") || starts_with(b, "GIF89a")) return ImageFormat::gif;
  if (starts_with(b, "BM") && b.size() >= 14) return ImageFormat::bmp;
  if (starts_with(b, "RIFF") && b.size() >= 12 && starts_with(b.subspan(8), "WEBP")) return ImageFormat::webp;
  if (starts_with(b, std::string_view("II*\0", 4)) || starts_with(b, std::string_view("MM\0*", 4))) {
    return ImageFormat::tiff;
  }
  if (b.size() >= 3 && byte_at(b, 0) == 'P' && byte_at(b, 1) >= '1' && byte_at(b, 1) <= '7' &&
      is_space(byte_at(b, 2))) {
    return ImageFormat::pnm;
  }
  return ImageFormat::unknown;
}

std::string_view format_name(ImageFormat format) noexcept {
  switch (format) {
    case ImageFormat::jpeg:
      return "JPEG";
    case ImageFormat::png:
      return "PNG";
    case ImageFormat::bmp:
      return "BMP";
    case ImageFormat::gif:
      return "GIF";
    case ImageFormat::webp:
      return "WebP";
    case ImageFormat::tiff:
      return "TIFF";
    case ImageFormat::pnm:
      return "PNM";
    case ImageFormat::dicom:
      return "DICOM";
    case ImageFormat::unknown:
      return "unknown";
  }
  return "unknown";
}

DecodeError::DecodeError(const std::string& name, const std::string& reason)
    : std::runtime_error(name + ": " + reason), name_(name), reason_(reason) {}

Decoder::Decoder(DecodeOptions options) : options_(std::move(options)) {}

namespace {

// Every size passed here is below 2^32 a side (JPEG 2^16, PNM parsed to 9 digits, the rest 32-bit
// fields or ints), so the product cannot overflow.
void check_pixels(std::uint64_t width, std::uint64_t height, std::uint64_t max_pixels, std::string_view format,
                  const std::string& name) {
  if (width * height > max_pixels) {
    throw DecodeError(name, std::string(format) + ": " + size_text(width, height) + " = " +
                                std::to_string(width * height) + " pixels exceeds DecodeOptions::max_pixels (" +
                                std::to_string(max_pixels) + "); a decompression bomb? Raise max_pixels to decode it");
  }
}

cv::Mat wrap_raw(const Sample& sample, std::uint64_t max_pixels) {
  const auto w = static_cast<std::uint64_t>(std::max(sample.width, 0));
  const auto h = static_cast<std::uint64_t>(std::max(sample.height, 0));
  if (w == 0 || h == 0 || sample.bytes.size() != w * h * 3) {
    throw DecodeError(sample.name, "raw RGB: " + std::to_string(sample.bytes.size()) + " bytes for a " +
                                       size_text(w, h) +
                                       " image, expected width * height * 3 = " + std::to_string(w * h * 3));
  }
  check_pixels(w, h, max_pixels, "raw RGB", sample.name);
  // Image pixels are owned and mutable (transforms work in place); Bytes are shared and immutable.
  return cv::Mat(sample.height, sample.width, CV_8UC3, const_cast<std::byte*>(sample.bytes.data())).clone();
}

}  // namespace

ImageInfo Decoder::probe(const Sample& sample) const {
  const std::string& name = sample.name;
  if (sample.encoding == Encoding::raw_rgb) {
    const cv::Mat raw = wrap_raw(sample, options_.max_pixels);
    return ImageInfo{.format = ImageFormat::unknown, .width = raw.cols, .height = raw.rows, .components = 3};
  }
  const auto bytes = sample.bytes.span();
  const ImageFormat format = detect_format(bytes);
  if (format == ImageFormat::jpeg) {
    const detail::JpegMarkers markers = detail::scan_jpeg_markers(bytes);
    if (markers.has_frame) check_pixels(markers.width, markers.height, options_.max_pixels, "JPEG", name);
    const detail::JpegReader reader(bytes, name, options_.strict);
    const detail::JpegHeader& h = reader.header();
    check_pixels(h.width, h.height, options_.max_pixels, "JPEG", name);
    const int orientation = options_.exif_orientation ? markers.orientation : 1;
    const bool swap = transposes(orientation);
    return ImageInfo{.format = format,
                     .width = swap ? h.height : h.width,
                     .height = swap ? h.width : h.height,
                     .components = h.components,
                     .orientation = orientation,
                     .progressive = h.progressive};
  }
  const auto declared = header_size(bytes, format);
  constexpr std::uint64_t int_max = std::numeric_limits<int>::max();
  if (declared && options_.other_formats && declared->width > 0 && declared->height > 0 && declared->width <= int_max &&
      declared->height <= int_max) {
    check_pixels(declared->width, declared->height, options_.max_pixels, format_name(format), name);
    return ImageInfo{.format = format,
                     .width = static_cast<int>(declared->width),
                     .height = static_cast<int>(declared->height),
                     .components = 3};
  }
  const cv::Mat decoded = pixels(sample, nullptr, options_.color, nullptr);  // throws the appropriate DecodeError
  return ImageInfo{.format = format, .width = decoded.cols, .height = decoded.rows, .components = 3};
}

Image Decoder::decode(const Sample& sample) const { return decode_image(sample, nullptr); }

Image Decoder::decode(const Sample& sample, const Region& region) const { return decode_image(sample, &region); }

Image Decoder::decode_image(const Sample& sample, const Region* region) const {
  cv::Size full;
  Image image{.pixels = pixels(sample, region, options_.color, &full),
              .layout = PixelLayout::hwc,
              .targets = sample.targets,
              .label = sample.label,
              .index = sample.index,
              .epoch = sample.epoch,
              .name = sample.name,
              .boxes = sample.boxes};
  if (region != nullptr) crop_resize_boxes(image.boxes, region->crop, region->out);
  if (!sample.mask.empty()) {
    cv::Mat mask = decode_mask(sample);
    if (mask.size() != full) {
      throw DecodeError(mask_name_of(sample), "the mask is " + std::to_string(mask.cols) + "x" +
                                                  std::to_string(mask.rows) + " but its image " + sample.name +
                                                  " is " + std::to_string(full.width) + "x" +
                                                  std::to_string(full.height) + "; a mask must match its image");
    }
    image.mask = region == nullptr ? std::move(mask) : resize_mask(mask(region->crop), region->out);
  }
  return image;
}

cv::Mat Decoder::decode_mask(const Sample& sample) const {
  const std::string name = mask_name_of(sample);
  if (sample.mask.empty()) throw DecodeError(name, "the sample has no mask");
  Sample file;
  file.bytes = sample.mask;
  file.name = name;
  cv::Mat mask = pixels(file, nullptr, DecodeColor::keep, nullptr);
  // A grey mask read through a decoder that makes colour of it: its channels are all equal.
  if (mask.channels() == 3 || mask.channels() == 4) {
    std::vector<cv::Mat> planes;
    cv::split(mask, planes);
    if (cv::countNonZero(planes[0] != planes[1]) == 0 && cv::countNonZero(planes[0] != planes[2]) == 0) {
      mask = planes[0];
    }
  }
  if (mask.channels() != 1 || !is_mask_depth(mask.depth())) {
    throw DecodeError(name, "a mask is one channel of class ids (uint8, uint16 or int32), but this file decodes to " +
                                describe_pixels(mask) +
                                " (a palette PNG comes out as colours: store the class ids as a grey PNG)");
  }
  return mask;
}

std::string Decoder::mask_name_of(const Sample& sample) {
  return sample.mask_name.empty() ? sample.name + " (its mask)" : sample.mask_name;
}

cv::Mat Decoder::pixels(const Sample& sample, const Region* region, DecodeColor color, cv::Size* full_size) const {
  const std::string& name = sample.name;
  // Crop and resize of an already decoded, upright image: the unfused path.
  const auto finish = [&](const cv::Mat& full) {
    if (full_size != nullptr) *full_size = full.size();
    if (region == nullptr) return full;
    check_region(*region, full.size(), name);
    return resize_pixels(full(region->crop), region->out, Interpolation::bilinear);
  };

  if (sample.encoding == Encoding::raw_rgb) return finish(wrap_raw(sample, options_.max_pixels));

  const auto bytes = sample.bytes.span();
  if (bytes.empty()) throw DecodeError(name, "empty file (0 bytes)");
  const ImageFormat format = detect_format(bytes);

  if (format == ImageFormat::jpeg) {
    // The frame header as written, before libjpeg sees it: a bomb is refused before any
    // image-sized allocation (libjpeg's own limit, 65500 pixels a side, still allows 4 gigapixels).
    const detail::JpegMarkers markers = detail::scan_jpeg_markers(bytes);
    if (markers.has_frame) check_pixels(markers.width, markers.height, options_.max_pixels, "JPEG", name);
    detail::JpegReader reader(bytes, name, options_.strict);
    const detail::JpegHeader& h = reader.header();
    check_pixels(h.width, h.height, options_.max_pixels, "JPEG", name);
    const int orientation = options_.exif_orientation ? markers.orientation : 1;
    // libjpeg expands grayscale to R = G = B: with DecodeColor::keep one of them is the image,
    // bit for bit, also after the fused path's resampling (each channel resampled alike).
    const bool grey = color == DecodeColor::keep && h.color == detail::JpegColor::gray;
    const auto finish_jpeg = [grey](const cv::Mat& rgb) {
      if (!grey) return rgb;
      cv::Mat one;
      cv::extractChannel(rgb, one, 0);
      return one;
    };
    const cv::Size stored(h.width, h.height);
    const cv::Size upright = transposes(orientation) ? cv::Size(h.height, h.width) : stored;
    if (full_size != nullptr) *full_size = upright;
    if (region == nullptr) return finish_jpeg(orient(reader.read(8), orientation));

    check_region(*region, upright, name);
    const cv::Rect stored_crop = to_stored(region->crop, orientation, stored);
    const int m = dct_scale(region->crop.size(), region->out);
    if (m == 8) {  // no DCT scaling: exactly the unfused crop and resize, on fewer decoded pixels
      return finish_jpeg(
          resize_pixels(orient(reader.read(8, stored_crop), orientation), region->out, Interpolation::bilinear));
    }
    const double f = m / 8.0;
    const cv::Size scaled = detail::jpeg_scaled_size(stored, m);
    // The reduction still to do after DCT scaling, across and down.
    const double reduce_x = f * region->crop.width / region->out.width;
    const double reduce_y = f * region->crop.height / region->out.height;
    const cv::Rect part = scaled_cover(stored_crop, m, scaled);
    const cv::Mat pixels = reader.read(m, part);
    if (reduce_x < 2 && reduce_y < 2) return finish_jpeg(resample_exact(pixels, part, f, *region, orientation, stored));
    // A crop of very different aspect ratio than the output, or one more than 16x larger: more
    // than 2x left to shrink, which needs resize_pixels' area filter rather than bilinear.
    // Resampled in the stored orientation (area averaging commutes with flips and transposes).
    const cv::Size out = transposes(orientation) ? cv::Size(region->out.height, region->out.width) : region->out;
    return finish_jpeg(orient(resample_area(pixels, f * stored_crop.x - part.x, f * stored_crop.y - part.y,
                                            f * stored_crop.br().x - part.x, f * stored_crop.br().y - part.y, out),
                              orientation));
  }

  if (format == ImageFormat::unknown) {
    throw DecodeError(name,
                      "not an image: the data starts with neither JPEG, PNG, BMP, GIF, WebP, TIFF, PNM nor "
                      "DICOM magic bytes (first bytes: " +
                          hex_prefix(bytes) + ")");
  }
  const std::string format_text(format_name(format));
  if (!options_.other_formats) {
    if (format == ImageFormat::dicom) {
      throw DecodeError(name,
                        "DICOM: no DICOM decoder: link stoke::dicom (DCMTK) and set DecodeOptions::other_formats = "
                        "stoke::nodes::dicom_codec() and DecodeOptions::color = DecodeColor::keep");
    }
    throw DecodeError(name, format_text +
                                ": this build decodes JPEG only; build with OpenCV imgcodecs "
                                "(stoke::imgcodecs) and set DecodeOptions::other_formats = "
                                "stoke::nodes::opencv_codec()");
  }
  const auto declared = header_size(bytes, format);
  if (declared) check_pixels(declared->width, declared->height, options_.max_pixels, format_text, name);
  cv::Mat decoded;
  try {
    decoded = options_.other_formats(bytes, name);
  } catch (const DecodeError&) {
    throw;
  } catch (const std::exception& e) {
    throw DecodeError(name, format_text + ": " + e.what());
  }
  if (decoded.empty()) throw DecodeError(name, format_text + ": the other_formats decoder returned no pixels");
  if (color == DecodeColor::rgb && decoded.type() != CV_8UC3) decoded = to_rgb8(decoded, format_text, name);
  if (!is_pixel_depth(decoded.depth())) {
    throw DecodeError(name, format_text + ": the other_formats decoder returned " + describe_pixels(decoded) +
                                "; an image holds uint8, uint16, int16 or float32 values");
  }
  const auto cols = static_cast<std::uint64_t>(decoded.cols);
  const auto rows = static_cast<std::uint64_t>(decoded.rows);
  check_pixels(cols, rows, options_.max_pixels, format_text, name);
  // probe() reports the header's size, and regions are planned on it: a file whose pixels
  // disagree with its header is inconsistent, not a region error.
  if (declared && (declared->width != cols || declared->height != rows)) {
    throw DecodeError(name, format_text + ": the header says " + size_text(declared->width, declared->height) +
                                " but the image decoded to " + size_text(cols, rows));
  }
  return finish(decoded);
}

}  // namespace stoke::nodes
