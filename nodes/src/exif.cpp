#include "exif.hpp"

namespace stoke::nodes::detail {

namespace {

std::uint32_t byte_at(std::span<const std::byte> s, std::size_t i) { return std::to_integer<std::uint32_t>(s[i]); }

// Reads a 16- or 32-bit integer in TIFF byte order; the caller has checked the bounds.
std::uint32_t read16(std::span<const std::byte> s, std::size_t at, bool little) {
  return little ? byte_at(s, at) | byte_at(s, at + 1) << 8 : byte_at(s, at) << 8 | byte_at(s, at + 1);
}
std::uint32_t read32(std::span<const std::byte> s, std::size_t at, bool little) {
  return little ? read16(s, at, true) | read16(s, at + 2, true) << 16
                : read16(s, at, false) << 16 | read16(s, at + 2, false);
}

constexpr std::uint32_t kTagWidth = 0x0100;
constexpr std::uint32_t kTagHeight = 0x0101;
constexpr std::uint32_t kTagOrientation = 0x0112;
constexpr std::uint32_t kTypeShort = 3;
constexpr std::uint32_t kTypeLong = 4;

bool is_sof(std::uint32_t marker) {
  // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC).
  return marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
}

}  // namespace

std::optional<TiffTags> read_tiff_ifd0(std::span<const std::byte> tiff) {
  if (tiff.size() < 8) return std::nullopt;
  bool little = false;
  if (byte_at(tiff, 0) == 'I' && byte_at(tiff, 1) == 'I') {
    little = true;
  } else if (!(byte_at(tiff, 0) == 'M' && byte_at(tiff, 1) == 'M')) {
    return std::nullopt;
  }
  if (read16(tiff, 2, little) != 42) return std::nullopt;
  const std::uint64_t ifd = read32(tiff, 4, little);
  if (ifd + 2 > tiff.size()) return std::nullopt;
  const std::uint32_t count = read16(tiff, ifd, little);
  TiffTags tags;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint64_t entry = ifd + 2 + 12ULL * i;
    if (entry + 12 > tiff.size()) break;  // a truncated IFD: keep what was read
    const std::uint32_t tag = read16(tiff, entry, little);
    const std::uint32_t type = read16(tiff, entry + 2, little);
    const std::uint32_t n = read32(tiff, entry + 4, little);
    if (n != 1 || (type != kTypeShort && type != kTypeLong)) continue;
    // A single SHORT sits in the first two bytes of the value field, whatever the byte order.
    const std::uint32_t value = type == kTypeShort ? read16(tiff, entry + 8, little) : read32(tiff, entry + 8, little);
    if (tag == kTagWidth) tags.width = value;
    if (tag == kTagHeight) tags.height = value;
    if (tag == kTagOrientation) tags.orientation = value;
  }
  return tags;
}

JpegMarkers scan_jpeg_markers(std::span<const std::byte> jpeg) {
  JpegMarkers found;
  if (jpeg.size() < 4 || byte_at(jpeg, 0) != 0xFF || byte_at(jpeg, 1) != 0xD8) return found;
  bool orientation_seen = false;
  std::size_t pos = 2;
  while (pos + 1 < jpeg.size()) {
    if (byte_at(jpeg, pos) != 0xFF) return found;                   // not at a marker: malformed, libjpeg will say so
    while (pos < jpeg.size() && byte_at(jpeg, pos) == 0xFF) ++pos;  // fill bytes
    if (pos >= jpeg.size()) return found;
    const std::uint32_t marker = byte_at(jpeg, pos++);
    if (marker == 0xD9 || marker == 0xDA) return found;                                    // EOI, SOS
    if (marker == 0x01 || marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7)) continue;  // no length
    if (pos + 2 > jpeg.size()) return found;
    const std::size_t length = byte_at(jpeg, pos) << 8 | byte_at(jpeg, pos + 1);
    if (length < 2 || pos + length > jpeg.size()) return found;
    const auto segment = jpeg.subspan(pos + 2, length - 2);
    if (is_sof(marker) && !found.has_frame && segment.size() >= 6) {
      found.has_frame = true;
      found.height = static_cast<int>(byte_at(segment, 1) << 8 | byte_at(segment, 2));
      found.width = static_cast<int>(byte_at(segment, 3) << 8 | byte_at(segment, 4));
      found.components = static_cast<int>(byte_at(segment, 5));
      found.progressive = marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE;
    } else if (marker == 0xE1 && !orientation_seen && segment.size() >= 6 && byte_at(segment, 0) == 'E' &&
               byte_at(segment, 1) == 'x' && byte_at(segment, 2) == 'i' && byte_at(segment, 3) == 'f' &&
               byte_at(segment, 4) == 0 && byte_at(segment, 5) == 0) {
      orientation_seen = true;  // only the first Exif segment counts, as in every viewer
      if (const auto tags = read_tiff_ifd0(segment.subspan(6)); tags && tags->orientation) {
        const std::uint32_t o = *tags->orientation;
        if (o >= 1 && o <= 8) found.orientation = static_cast<int>(o);
      }
    }
    pos += length;
  }
  return found;
}

}  // namespace stoke::nodes::detail
