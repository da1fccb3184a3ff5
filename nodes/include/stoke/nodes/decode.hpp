// Decode: Sample (encoded bytes) -> Image (8-bit RGB pixels, or what the file holds with
// DecodeColor::keep), with libjpeg-turbo for JPEG, a pluggable decoder for other formats (PNG,
// ..., DICOM), and a fused "decode only this region at a reduced DCT scale" path that makes
// crop-and-resize augmentation much cheaper than decoding everything.
//
//   stoke::nodes::Decoder decoder({.exif_orientation = true});
//   Image full = decoder.decode(sample);
//   Image crop = decoder.decode(sample, Region{cv::Rect(40, 30, 300, 200), cv::Size(224, 224)});
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <opencv2/core/mat.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "stoke/nodes/image.hpp"
#include "stoke/nodes/sample.hpp"
#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// An encoded image's container format, as told by its first bytes.
enum class ImageFormat { jpeg, png, bmp, gif, webp, tiff, pnm, dicom, unknown };

/// The format from the magic bytes at the start of `bytes` (never from a file name): JPEG
/// FF D8 FF, PNG's 8-byte signature, "BM", "GIF87a"/"GIF89a", "RIFF....WEBP", "II*\0"/"MM\0*",
/// "P1".."P7" followed by whitespace, "DICM" after DICOM Part 10's 128-byte preamble. `unknown`
/// for anything else, including empty input.
ImageFormat detect_format(std::span<const std::byte> bytes) noexcept;

/// "JPEG", "PNG", "BMP", "GIF", "WebP", "TIFF", "PNM", "DICOM" or "unknown".
std::string_view format_name(ImageFormat format) noexcept;

/// A sample that cannot be decoded: bad or truncated data, an unsupported format, too many
/// pixels. what() reads "<sample name>: <reason>", e.g.
/// "cats/17.jpg: JPEG: Premature end of JPEG file (...)".
class DecodeError : public std::runtime_error {
 public:
  DecodeError(const std::string& name, const std::string& reason);
  /// The sample's name as given (a path, "shard.pack#17", ...).
  const std::string& name() const noexcept { return name_; }
  /// The message without the name.
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string name_;
  std::string reason_;
};

/// What probe() reads from a header.
struct ImageInfo {
  ImageFormat format = ImageFormat::unknown;  ///< `unknown` for raw_rgb samples
  int width = 0;   ///< pixels, after EXIF orientation when DecodeOptions::exif_orientation is on
  int height = 0;  ///< pixels, likewise
  /// Colour channels stored in a JPEG: 1 grayscale, 3 YCbCr/RGB, 4 CMYK/YCCK (the decoded Image
  /// is 3-channel RGB, or with DecodeColor::keep 1 channel for grayscale). 3 for raw_rgb and for
  /// formats decoded by other_formats, whatever they return.
  int components = 0;
  /// The EXIF orientation applied (1..8; 1 = none, also when exif_orientation is off).
  int orientation = 1;
  bool progressive = false;  ///< a progressive JPEG
};

/// Decodes a non-JPEG image: returns its pixels or throws (DecodeError preferably). `name` is the
/// sample's name, for messages. Called concurrently from several threads. It may return any image
/// the file holds, in RGB(A) order: uint8, uint16, int16 or float32 with any channel count
/// (opencv_codec(DecodeColor::keep), stoke::dicom's dicom_codec()). With DecodeColor::rgb the
/// Decoder makes 8-bit RGB of 1, 3 or 4 channels of uint8 or uint16 (grey expanded, alpha
/// dropped, 16 bits scaled to 8) and refuses the rest, naming DecodeColor::keep.
using OtherFormatDecoder = std::function<cv::Mat(std::span<const std::byte>, const std::string& name)>;

/// What a decode returns.
enum class DecodeColor : std::uint8_t {
  /// 8-bit RGB whatever the file holds (grayscale expanded, CMYK converted): what photo models
  /// and the image-classification apps take.
  rgb,
  /// What the file holds: a grayscale JPEG as one channel (CV_8UC1), a colour one as RGB (CMYK
  /// still converted to RGB); other formats as other_formats returns them (16-bit PNG as uint16,
  /// DICOM as modality values). Values are never rescaled.
  keep,
};

struct DecodeOptions {
  /// Decompression-bomb guard: images of more pixels (width * height) are refused with a
  /// DecodeError, checked from the header before anything image-sized is allocated (for other
  /// formats: before other_formats is called when stoke can read that format's header, and always
  /// on its result).
  std::uint64_t max_pixels = 64'000'000;
  /// Apply the EXIF Orientation tag (JPEG APP1) so that the image is upright; probe() sizes and
  /// Region coordinates then refer to the upright image.
  bool exif_orientation = false;
  /// libjpeg's warnings about corrupt data (truncated file, bad Huffman or arithmetic code,
  /// premature end of a data segment, extraneous bytes before a marker, a bad progression) are
  /// DecodeErrors. Off: they are ignored and libjpeg's best effort is returned (e.g. a truncated
  /// file's missing rows are grey). Warnings about metadata (JFIF version, ICC profile, Adobe
  /// transform code) never fail a decode.
  bool strict = true;
  /// Decoder for PNG, BMP, GIF, WebP, TIFF, PNM and DICOM input (e.g. stoke::nodes::opencv_codec()
  /// from stoke::imgcodecs, dicom_codec() from stoke::dicom, which also hands other formats on).
  /// Empty: such input is a DecodeError saying "PNG: this build decodes JPEG only; build with
  /// OpenCV imgcodecs (stoke::imgcodecs)".
  OtherFormatDecoder other_formats{};
  /// 8-bit RGB always (the default), or what the file holds.
  DecodeColor color = DecodeColor::rgb;
};

/// Decodes Samples into 8-bit RGB Images, or with DecodeColor::keep into what the files hold.
///
/// JPEG goes through libjpeg-turbo (grayscale, YCbCr, RGB, CMYK and Adobe YCCK; baseline and
/// progressive), with the accurate integer IDCT (JDCT_ISLOW) and smooth chroma upsampling. Samples
/// with Encoding::raw_rgb are checked (size == width * height * 3) and copied, not decoded.
/// Progressive JPEGs with more than 500 scans are refused (a known CPU-exhaustion attack).
///
/// Thread-safety: immutable after construction; every call uses its own libjpeg state, so one
/// Decoder may be shared by any number of threads (other_formats must be thread-safe too).
class Decoder {
 public:
  explicit Decoder(DecodeOptions options = {});

  /// Format, size and components from the header alone (JPEG: no pixel is decoded). For formats
  /// decoded by other_formats the size comes from the header where stoke can read it (PNG, BMP,
  /// GIF, WebP, TIFF, PNM); if it cannot, the image is decoded to learn it. Throws DecodeError
  /// like decode() (bad header, too many pixels, unsupported format).
  ImageInfo probe(const Sample& sample) const;

  /// The whole image: Image{hwc, CV_8UC3 RGB (DecodeColor::keep: what the file holds),
  /// label/index/epoch/name/targets copied from the sample, and its mask decoded when it has one
  /// (decode_mask; a mask of another size than the image is a DecodeError naming both)}. Throws
  /// DecodeError naming the sample.
  Image decode(const Sample& sample) const;

  /// The sample's `region.crop` (pixels of the upright image, inside it) resampled to exactly
  /// `region.out`, as if the whole image were decoded, cropped and resized with resize_pixels()
  /// (bilinear: pixel-area averaging when shrinking). For JPEG this is fused into decoding: the
  /// smallest DCT scale of 1/8, 1/4, 1/2 and 1 that keeps the crop at least `region.out` large is
  /// used, rows above the crop are skipped, only the iMCU columns it touches are decoded, and
  /// decoding stops after its last row (so damage below the crop goes unnoticed). At scale 1 the
  /// crop is then resized exactly like the unfused path; at smaller scales it is resampled at its
  /// exact sub-pixel position (bilinear for the < 2x left, area averaging beyond). The pixels
  /// differ from the unfused ones only by the DCT-domain downscaling: measured >= 30 dB PSNR per
  /// crop on real photos, 47 dB pooled (tests/nodes/decode_fused_test.cpp).
  /// Other formats and raw RGB are decoded whole, then cropped and resized. The mask, if any, is
  /// cropped to `region.crop` and resized to `region.out` with nearest-neighbour sampling.
  /// Throws std::invalid_argument naming the sample when the crop is empty or outside the image
  /// or `region.out` is not positive; DecodeError like decode() otherwise.
  Image decode(const Sample& sample, const Region& region) const;

  /// The sample's mask (Sample::mask) alone, decoded as DecodeColor::keep: one channel of class
  /// ids (uint8, uint16 or int32; a colour decode whose channels are all equal gives one of them).
  /// decode() attaches it to the Image, checked against the image's size and cropped and resized
  /// (nearest-neighbour) with the region. Throws DecodeError naming the mask's file.
  cv::Mat decode_mask(const Sample& sample) const;

  const DecodeOptions& options() const noexcept { return options_; }

 private:
  Image decode_image(const Sample& sample, const Region* region) const;
  /// The pixels in `color`; `full_size`, when given, receives the whole upright image's size.
  cv::Mat pixels(const Sample& sample, const Region* region, DecodeColor color, cv::Size* full_size) const;
  static std::string mask_name_of(const Sample& sample);

  DecodeOptions options_;
};

}  // namespace stoke::nodes
