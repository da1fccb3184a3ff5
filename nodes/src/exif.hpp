// Private to stoke::nodes: reading the few header fields the decoder needs straight from the bytes,
// without libjpeg: the JPEG frame size (for the decompression-bomb guard) and EXIF orientation,
// and the first IFD of a TIFF structure (EXIF's payload, and TIFF files themselves).
// Every reader is bounds-checked against the span and gives up (nullopt / defaults) on anything
// malformed; the decoder proper reports the error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace stoke::nodes::detail {

/// The fields of a TIFF structure's first IFD (IFD0) that stoke uses.
struct TiffTags {
  std::optional<std::uint32_t> width;        ///< 0x0100 ImageWidth
  std::optional<std::uint32_t> height;       ///< 0x0101 ImageLength
  std::optional<std::uint32_t> orientation;  ///< 0x0112 Orientation (EXIF: 1..8)
};

/// Reads IFD0 of the TIFF structure that starts at `tiff[0]` ("II*\0" little-endian or "MM\0*"
/// big-endian). nullopt when the header is not TIFF's or IFD0 lies outside the span.
std::optional<TiffTags> read_tiff_ifd0(std::span<const std::byte> tiff);

/// What a scan of a JPEG's marker segments up to the first SOS found.
struct JpegMarkers {
  bool has_frame = false;  ///< a SOFn segment was found; the fields below are valid
  int width = 0;           ///< samples per line, from SOFn
  int height = 0;          ///< lines, from SOFn (0: defined by a later DNL marker)
  int components = 0;
  bool progressive = false;  ///< SOF2, SOF6, SOF10, SOF14
  int orientation = 1;       ///< EXIF Orientation (APP1 "Exif"), 1..8; 1 when absent or invalid
};

/// Walks the marker segments of a JPEG from SOI to the first SOS (or the end of the span, or the
/// first malformed segment). Costs a few hundred byte reads; allocates nothing.
JpegMarkers scan_jpeg_markers(std::span<const std::byte> jpeg);

}  // namespace stoke::nodes::detail
