#include "stoke/nodes/dicom_codec.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// DCMTK: osconfig.h first, as DCMTK requires.
#include <dcmtk/config/osconfig.h>
#include <dcmtk/dcmdata/dcdatset.h>
#include <dcmtk/dcmdata/dcdeftag.h>
#include <dcmtk/dcmdata/dcdict.h>
#include <dcmtk/dcmdata/dcfilefo.h>
#include <dcmtk/dcmdata/dcistrmb.h>
#include <dcmtk/dcmdata/dcmetinf.h>
#include <dcmtk/oflog/oflog.h>
#include <dcmtk/dcmdata/dccodec.h>
#include <dcmtk/dcmdata/dcpixel.h>
#include <dcmtk/dcmdata/dcpixseq.h>
#include <dcmtk/dcmdata/dcpxitem.h>
#include <dcmtk/dcmdata/dcrledrg.h>
#include <dcmtk/dcmdata/dcsequen.h>
#include <dcmtk/dcmdata/dcxfer.h>
#include <dcmtk/dcmjpeg/djdecode.h>
#include <dcmtk/dcmjpls/djdecode.h>

namespace stoke::nodes {

namespace {

constexpr std::size_t preamble_size = 128;
constexpr std::uint64_t max_frame_pixels = 64'000'000;

[[noreturn]] void fail(const std::string& name, const std::string& reason) { throw DecodeError(name, "DICOM: " + reason); }

// DCMTK's decompression codecs live in one global registry that every thread reads under DCMTK's
// own lock; registering is done once. They stay registered until the process exits.
void register_codecs() {
  static std::once_flag once;
  std::call_once(once, [] {
    // DCMTK logs what it finds wrong in a file on stderr; stoke reports it in the DecodeError that
    // names the file (skipped and listed, or failing the run), so the log would only say it twice.
    OFLog::configure(OFLogger::FATAL_LOG_LEVEL);
    DJDecoderRegistration::registerCodecs();     // JPEG baseline, extended, lossless (dcmjpeg)
    DJLSDecoderRegistration::registerCodecs();   // JPEG-LS lossless and near-lossless (dcmjpls)
    DcmRLEDecoderRegistration::registerCodecs();  // RLE lossless (dcmdata)
  });
}

std::string hex_prefix(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < std::min<std::size_t>(bytes.size(), 8); ++i) {
    const auto b = std::to_integer<unsigned>(bytes[i]);
    if (i > 0) text += ' ';
    text += digits[b >> 4];
    text += digits[b & 15];
  }
  return text.empty() ? "none, it is empty" : text;
}

void require_part10(std::span<const std::byte> bytes, const std::string& name) {
  if (!looks_like_dicom(bytes)) {
    fail(name, "not a DICOM Part 10 file: no \"DICM\" after the 128-byte preamble (" + std::to_string(bytes.size()) +
                   " bytes; first bytes: " + hex_prefix(bytes) + ")");
  }
  if (!dcmDataDict.isDictionaryLoaded()) {
    fail(name, "DCMTK's data dictionary is not loaded: install it (Debian: libdcmtk17 puts it in /usr/share/libdcmtk17) "
               "or point the environment variable DCMDICTPATH at dicom.dic");
  }
}

// Where the value of the last native Pixel Data element of `length` bytes starts in the raw file,
// for the message about a truncated file: the element header is searched for from the end.
std::optional<std::size_t> pixel_value_offset(std::span<const std::byte> bytes, Uint32 length, bool big_endian) {
  const auto u8 = [&](std::size_t i) { return std::to_integer<std::uint8_t>(bytes[i]); };
  const auto le32 = [&](std::size_t i) {
    return static_cast<Uint32>(u8(i)) | static_cast<Uint32>(u8(i + 1)) << 8 | static_cast<Uint32>(u8(i + 2)) << 16 |
           static_cast<Uint32>(u8(i + 3)) << 24;
  };
  const auto be32 = [&](std::size_t i) {
    return static_cast<Uint32>(u8(i)) << 24 | static_cast<Uint32>(u8(i + 1)) << 16 | static_cast<Uint32>(u8(i + 2)) << 8 |
           static_cast<Uint32>(u8(i + 3));
  };
  if (bytes.size() < preamble_size + 4 + 8) return std::nullopt;
  for (std::size_t at = bytes.size() - 8; at > preamble_size + 4; --at) {
    const bool le_tag = u8(at) == 0xE0 && u8(at + 1) == 0x7F && u8(at + 2) == 0x10 && u8(at + 3) == 0x00;
    const bool be_tag = u8(at) == 0x7F && u8(at + 1) == 0xE0 && u8(at + 2) == 0x00 && u8(at + 3) == 0x10;
    if (!(big_endian ? be_tag : le_tag)) continue;
    // Explicit VR: tag, "OB"/"OW", two reserved bytes, 32-bit length. Implicit VR: tag, length.
    if (at + 12 <= bytes.size() && u8(at + 4) == 'O' && (u8(at + 5) == 'B' || u8(at + 5) == 'W')) {
      if ((big_endian ? be32(at + 8) : le32(at + 8)) == length) return at + 12;
    }
    if (!big_endian && le32(at + 4) == length) return at + 8;
  }
  return std::nullopt;
}

std::string transfer_syntax_label(const std::string& uid) {
  const DcmXfer xfer(uid.c_str());
  const std::string known = xfer.getXfer() == EXS_Unknown ? std::string() : std::string(xfer.getXferName());
  return known.empty() ? uid : known + " (" + uid + ")";
}

// Everything the decoder needs from the data set, checked.
struct Header {
  DicomInfo info;
  E_TransferSyntax xfer = EXS_Unknown;
  int planar = 0;  // Planar Configuration: 0 colour-by-pixel, 1 colour-by-plane
};

struct Parsed {
  DcmFileFormat file;
  OFCondition status;
};

// The whole file, from the caller's bytes. (Stopping at the Pixel Data, DcmFileFormat::readUntilTag,
// would save copying it, but logs a warning for every file.)
void parse(Parsed& parsed, std::span<const std::byte> bytes) {
  DcmInputBufferStream stream;
  stream.setBuffer(bytes.data(), static_cast<offile_off_t>(bytes.size()));
  stream.setEos();
  parsed.file.transferInit();
  parsed.status = parsed.file.read(stream);
  parsed.file.transferEnd();
}

bool has_pixel_data(Parsed& parsed) {
  DcmElement* pixels = nullptr;
  return parsed.file.getDataset()->findAndGetElement(DCM_PixelData, pixels).good() && pixels != nullptr;
}

std::string read_failure(Parsed& parsed, std::span<const std::byte> bytes) {
  DcmDataset& data = *parsed.file.getDataset();
  const std::string dcmtk = std::string(" (DCMTK: ") + parsed.status.text() + ")";
  DcmElement* pixels = nullptr;
  if (data.findAndGetElement(DCM_PixelData, pixels).good() && pixels != nullptr) {
    const DcmXfer xfer(data.getOriginalXfer());
    if (xfer.isEncapsulated()) {
      return "truncated or damaged file: the compressed Pixel Data is cut off or malformed" + dcmtk;
    }
    const Uint32 length = pixels->getLength();
    const auto offset = pixel_value_offset(bytes, length, xfer.getByteOrder() == EBO_BigEndian);
    if (offset && *offset <= bytes.size() && bytes.size() - *offset < length) {
      return "truncated file: the Pixel Data ends after " + std::to_string(bytes.size() - *offset) + " of " +
             std::to_string(length) + " bytes";
    }
    return "damaged or truncated file: the data after the Pixel Data header cannot be read" + dcmtk;
  }
  if (parsed.status == EC_StreamNotifyClient) {
    return "truncated file: it ends inside the header, before the Pixel Data (" + std::to_string(bytes.size()) +
           " bytes)" + dcmtk;
  }
  return "damaged or truncated file: the header cannot be parsed" + dcmtk;
}

Header read_header(Parsed& parsed, const std::string& name) {
  DcmDataset& data = *parsed.file.getDataset();
  Header h;
  DicomInfo& info = h.info;
  h.xfer = data.getOriginalXfer();

  OFString text;
  if (parsed.file.getMetaInfo()->findAndGetOFString(DCM_TransferSyntaxUID, text).good() && !text.empty()) {
    info.transfer_syntax = text.c_str();
  } else {
    info.transfer_syntax = DcmXfer(h.xfer).getXferID();
  }
  if (data.findAndGetOFString(DCM_PhotometricInterpretation, text).good()) info.photometric = text.c_str();
  if (data.findAndGetOFString(DCM_Modality, text).good()) info.modality = text.c_str();

  const auto u16 = [&](const DcmTagKey& tag, const char* what, bool required) -> int {
    Uint16 value = 0;
    if (data.findAndGetUint16(tag, value).bad()) {
      if (required) fail(name, std::string("the header has no ") + what + ": not an image");
      return -1;
    }
    return value;
  };
  info.height = u16(DCM_Rows, "Rows (0028,0010)", true);
  info.width = u16(DCM_Columns, "Columns (0028,0011)", true);
  info.channels = u16(DCM_SamplesPerPixel, "Samples per Pixel (0028,0002)", true);
  info.bits_allocated = u16(DCM_BitsAllocated, "Bits Allocated (0028,0100)", true);
  info.bits_stored = u16(DCM_BitsStored, "Bits Stored (0028,0101)", false);
  if (info.bits_stored < 0) info.bits_stored = info.bits_allocated;
  info.is_signed = u16(DCM_PixelRepresentation, "Pixel Representation (0028,0103)", false) == 1;
  h.planar = std::max(0, u16(DCM_PlanarConfiguration, "Planar Configuration (0028,0006)", false));
  Sint32 frames = 1;
  if (data.findAndGetSint32(DCM_NumberOfFrames, frames).good() && frames > 0) info.frames = frames;
  Float64 slope = 1;
  Float64 intercept = 0;
  if (data.findAndGetFloat64(DCM_RescaleSlope, slope).good() && std::isfinite(slope)) info.slope = slope;
  if (data.findAndGetFloat64(DCM_RescaleIntercept, intercept).good() && std::isfinite(intercept)) {
    info.intercept = intercept;
  }

  if (info.width == 0 || info.height == 0) {
    fail(name, "the image is empty: Rows " + std::to_string(info.height) + ", Columns " + std::to_string(info.width));
  }
  if (info.channels == 0) fail(name, "Samples per Pixel is 0");
  return h;
}

// ---- pixel values --------------------------------------------------------------------------------

// Calls f(i, value) for each of the `count` samples of a monochrome frame: the stored value
// masked to bits_stored and sign-extended when signed.
template <typename F>
void for_each_sample(const std::uint8_t* frame, std::size_t count, const DicomInfo& info, F&& f) {
  const int bits = info.bits_stored;
  const std::uint64_t mask = bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
  const auto value = [&](std::uint64_t raw) -> std::int64_t {
    raw &= mask;
    if (info.is_signed && (raw & sign) != 0) return static_cast<std::int64_t>(raw) - static_cast<std::int64_t>(mask) - 1;
    return static_cast<std::int64_t>(raw);
  };
  switch (info.bits_allocated) {
    case 1:
      for (std::size_t i = 0; i < count; ++i) f(i, value((frame[i / 8] >> (i % 8)) & 1U));
      break;
    case 8:
      for (std::size_t i = 0; i < count; ++i) f(i, value(frame[i]));
      break;
    case 16:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint16_t raw;
        std::memcpy(&raw, frame + 2 * i, 2);
        f(i, value(raw));
      }
      break;
    case 32:
      for (std::size_t i = 0; i < count; ++i) {
        std::uint32_t raw;
        std::memcpy(&raw, frame + 4 * i, 4);
        f(i, value(raw));
      }
      break;
    default:
      break;  // refused before
  }
}

struct ModalityLut {
  std::vector<std::uint16_t> entries;
  std::int64_t first_mapped = 0;
  int depth = 16;
};

std::optional<ModalityLut> modality_lut(DcmDataset& data, const DicomInfo& info, const std::string& name) {
  DcmItem* item = nullptr;
  if (data.findAndGetSequenceItem(DCM_ModalityLUTSequence, item, 0).bad() || item == nullptr) return std::nullopt;
  Uint16 descriptor[3] = {0, 0, 0};
  for (unsigned long i = 0; i < 3; ++i) {
    if (item->findAndGetUint16(DCM_LUTDescriptor, descriptor[i], i).bad()) {
      fail(name, "the Modality LUT Sequence has no complete LUT Descriptor (0028,3002)");
    }
  }
  ModalityLut lut;
  const std::size_t count = descriptor[0] == 0 ? 65536 : descriptor[0];
  // The first mapped value has the pixels' signedness (US or SS by Pixel Representation).
  lut.first_mapped = info.is_signed ? static_cast<std::int16_t>(descriptor[1]) : descriptor[1];
  lut.depth = descriptor[2];
  const Uint16* values = nullptr;
  unsigned long available = 0;
  if (item->findAndGetUint16Array(DCM_LUTData, values, &available).bad() || values == nullptr || available < count) {
    fail(name, "the Modality LUT Sequence's LUT Data (0028,3006) has " + std::to_string(available) +
                   " entries, fewer than the " + std::to_string(count) + " of its descriptor");
  }
  lut.entries.assign(values, values + count);
  return lut;
}

bool is_integer(double x) { return std::floor(x) == x && std::fabs(x) < 1e15; }

cv::Mat monochrome(const std::uint8_t* frame, DcmDataset& data, const DicomInfo& info, const std::string& name) {
  const int rows = info.height;
  const int cols = info.width;
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);

  if (auto lut = modality_lut(data, info, name)) {
    const auto last = static_cast<std::int64_t>(lut->entries.size()) - 1;
    const auto entry = [&](std::int64_t v) {
      const std::int64_t index = v < lut->first_mapped ? 0 : std::min(v - lut->first_mapped, last);
      return lut->entries[static_cast<std::size_t>(index)];
    };
    if (lut->depth <= 8) {
      cv::Mat out(rows, cols, CV_8UC1);
      auto* o = out.ptr<std::uint8_t>();
      for_each_sample(frame, count, info, [&](std::size_t i, std::int64_t v) { o[i] = static_cast<std::uint8_t>(entry(v)); });
      return out;
    }
    cv::Mat out(rows, cols, CV_16UC1);
    auto* o = out.ptr<std::uint16_t>();
    for_each_sample(frame, count, info, [&](std::size_t i, std::int64_t v) { o[i] = entry(v); });
    return out;
  }

  const bool rescale = data.tagExists(DCM_RescaleSlope) && data.tagExists(DCM_RescaleIntercept) &&
                       !(info.slope == 1 && info.intercept == 0);
  if (!rescale) {
    if (!info.is_signed && info.bits_allocated <= 8) {
      cv::Mat out(rows, cols, CV_8UC1);
      auto* o = out.ptr<std::uint8_t>();
      for_each_sample(frame, count, info, [&](std::size_t i, std::int64_t v) { o[i] = static_cast<std::uint8_t>(v); });
      return out;
    }
    if (!info.is_signed && info.bits_allocated == 16) {
      cv::Mat out(rows, cols, CV_16UC1);
      auto* o = out.ptr<std::uint16_t>();
      for_each_sample(frame, count, info, [&](std::size_t i, std::int64_t v) { o[i] = static_cast<std::uint16_t>(v); });
      return out;
    }
    if (info.is_signed && info.bits_allocated <= 16) {
      cv::Mat out(rows, cols, CV_16SC1);
      auto* o = out.ptr<std::int16_t>();
      for_each_sample(frame, count, info, [&](std::size_t i, std::int64_t v) { o[i] = static_cast<std::int16_t>(v); });
      return out;
    }
    cv::Mat out(rows, cols, CV_32FC1);
    auto* o = out.ptr<float>();
    for_each_sample(frame, count, info, [&](std::size_t i, std::int64_t v) { o[i] = static_cast<float>(v); });
    return out;
  }

  // Integer slope and intercept: exact integer results, 16 bits when all of them fit (a linear map
  // takes its extremes at the stored extremes). Stored values are below 2^32 in magnitude, so the
  // bounds on slope and intercept keep the products exact in 64 bits.
  if (is_integer(info.slope) && is_integer(info.intercept) && std::fabs(info.slope) <= 65536 &&
      std::fabs(info.intercept) <= 1e12) {
    const auto slope = static_cast<std::int64_t>(info.slope);
    const auto intercept = static_cast<std::int64_t>(info.intercept);
    std::int64_t lo = std::numeric_limits<std::int64_t>::max();
    std::int64_t hi = std::numeric_limits<std::int64_t>::min();
    for_each_sample(frame, count, info, [&](std::size_t, std::int64_t v) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    });
    const std::int64_t a = lo * slope + intercept;
    const std::int64_t b = hi * slope + intercept;
    if (std::min(a, b) >= std::numeric_limits<std::int16_t>::min() && std::max(a, b) <= std::numeric_limits<std::int16_t>::max()) {
      cv::Mat out(rows, cols, CV_16SC1);
      auto* o = out.ptr<std::int16_t>();
      for_each_sample(frame, count, info,
                      [&](std::size_t i, std::int64_t v) { o[i] = static_cast<std::int16_t>(v * slope + intercept); });
      return out;
    }
  }
  cv::Mat out(rows, cols, CV_32FC1);
  auto* o = out.ptr<float>();
  for_each_sample(frame, count, info, [&](std::size_t i, std::int64_t v) {
    o[i] = static_cast<float>(static_cast<double>(v) * info.slope + info.intercept);
  });
  return out;
}

// PS3.3 C.7.6.3.1.2, with pydicom's coefficients and rounding (convert_color_space).
template <typename T>
void ybr_full_to_rgb(cv::Mat& image, int bits_stored) {
  const float offset = static_cast<float>(1U << (bits_stored - 1));
  const float top = static_cast<float>((1U << bits_stored) - 1);
  const float cb_g = -0.114F * 1.772F / 0.587F;
  const float cr_g = -0.299F * 1.402F / 0.587F;
  const auto clamp = [top](float x) { return static_cast<T>(std::clamp(std::floor(x + 0.5F), 0.0F, top)); };
  for (int y = 0; y < image.rows; ++y) {
    auto* p = image.ptr<cv::Vec<T, 3>>(y);
    for (int x = 0; x < image.cols; ++x) {
      const float luma = p[x][0];
      const float cb = static_cast<float>(p[x][1]) - offset;
      const float cr = static_cast<float>(p[x][2]) - offset;
      p[x] = cv::Vec<T, 3>(clamp(luma + 1.402F * cr), clamp(luma + cb_g * cb + cr_g * cr), clamp(luma + 1.772F * cb));
    }
  }
}

template <typename T>
cv::Mat colour_typed(const std::uint8_t* frame, const DicomInfo& info, int planar, const std::string& model) {
  const int rows = info.height;
  const int cols = info.width;
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  const T mask = static_cast<T>(info.bits_stored >= static_cast<int>(8 * sizeof(T)) ? std::numeric_limits<T>::max()
                                                                                     : (1U << info.bits_stored) - 1);
  const auto sample = [&](std::size_t k) {
    T v;
    std::memcpy(&v, frame + k * sizeof(T), sizeof(T));
    return static_cast<T>(v & mask);
  };
  cv::Mat out(rows, cols, CV_MAKETYPE(cv::DataType<T>::depth, 3));
  auto* o = out.ptr<cv::Vec<T, 3>>();
  if (model == "YBR_FULL_422" && planar == 0) {
    // Two pixels in four samples, Y1 Y2 Cb Cr; the chroma is shared (pydicom duplicates it too).
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t pair = (i / 2) * 4;
      o[i] = cv::Vec<T, 3>(sample(pair + i % 2), sample(pair + 2), sample(pair + 3));
    }
  } else if (planar == 0) {
    for (std::size_t i = 0; i < count; ++i) o[i] = cv::Vec<T, 3>(sample(3 * i), sample(3 * i + 1), sample(3 * i + 2));
  } else {
    for (std::size_t i = 0; i < count; ++i) o[i] = cv::Vec<T, 3>(sample(i), sample(count + i), sample(2 * count + i));
  }
  if (model != "RGB") ybr_full_to_rgb<T>(out, info.bits_stored);
  return out;
}

cv::Mat colour(const std::uint8_t* frame, const DicomInfo& info, int planar, const std::string& model) {
  return info.bits_allocated == 8 ? colour_typed<std::uint8_t>(frame, info, planar, model)
                                  : colour_typed<std::uint16_t>(frame, info, planar, model);
}

// Refuses what the pixel code does not handle, before anything image-sized is allocated.
void check_layout(const DicomInfo& info, const std::string& name) {
  const std::uint64_t pixels = static_cast<std::uint64_t>(info.width) * static_cast<std::uint64_t>(info.height);
  if (pixels > max_frame_pixels) {
    fail(name, std::to_string(info.width) + "x" + std::to_string(info.height) + " = " + std::to_string(pixels) +
                   " pixels in a frame, more than the limit of " + std::to_string(max_frame_pixels));
  }
  if (info.channels != 1 && info.channels != 3) {
    fail(name, "Samples per Pixel " + std::to_string(info.channels) + " is not supported (only 1 and 3 are)");
  }
  const int ba = info.bits_allocated;
  if (ba != 1 && ba != 8 && ba != 16 && ba != 32) {
    fail(name, "Bits Allocated " + std::to_string(ba) + " is not supported (only 1, 8, 16 and 32 are)");
  }
  if (info.bits_stored < 1 || info.bits_stored > ba) {
    fail(name, "Bits Stored " + std::to_string(info.bits_stored) + " does not fit Bits Allocated " + std::to_string(ba));
  }
  if (info.channels == 3) {
    if (ba != 8 && ba != 16) {
      fail(name, "colour with Bits Allocated " + std::to_string(ba) + " is not supported (only 8 and 16 are)");
    }
    if (info.is_signed) fail(name, "colour with signed samples (Pixel Representation 1) is not supported");
  }
}

// DCMTK's RLE decoder trusts the segment offsets in the RLE header and reads the last byte a
// segment produced even when it produced none; these are checked here first, for the fragment it
// will decode (PS3.5 G.3: a 64-byte header, then the segments, each PackBits-coded).
void check_rle(DcmPixelData& pixel_data, E_TransferSyntax xfer, const DicomInfo& info, const std::string& name) {
  DcmPixelSequence* sequence = nullptr;
  if (pixel_data.getEncapsulatedRepresentation(xfer, nullptr, sequence).bad() || sequence == nullptr) {
    fail(name, "damaged RLE Pixel Data: no fragments");
  }
  Uint32 index = 0;
  DcmPixelItem* fragment = nullptr;
  Uint8* data = nullptr;
  if (DcmCodec::determineStartFragment(0, info.frames, sequence, index).bad() ||
      sequence->getItem(fragment, index).bad() || fragment == nullptr || fragment->getUint8Array(data).bad()) {
    fail(name, "damaged RLE Pixel Data: the first frame's fragment is missing");
  }
  const Uint32 length = fragment->getLength();
  if (data == nullptr || length < 64) {
    fail(name, "damaged RLE Pixel Data: the first frame's fragment (" + std::to_string(length) +
                   " bytes) is shorter than the 64-byte RLE header");
  }
  const auto le32 = [&](std::size_t at) {
    return static_cast<Uint32>(data[at]) | static_cast<Uint32>(data[at + 1]) << 8 | static_cast<Uint32>(data[at + 2]) << 16 |
           static_cast<Uint32>(data[at + 3]) << 24;
  };
  const Uint32 segments = le32(0);
  const auto expected = static_cast<Uint32>(info.bits_allocated / 8 * info.channels);
  if (segments != expected || segments == 0 || segments > 15) {
    fail(name, "damaged RLE Pixel Data: " + std::to_string(segments) + " segments where " +
                   std::to_string(info.channels) + " samples of " + std::to_string(info.bits_allocated) +
                   " bits need " + std::to_string(expected));
  }
  for (Uint32 i = 0; i < segments; ++i) {
    const Uint32 begin = le32(4 + 4 * static_cast<std::size_t>(i));
    const Uint32 end = i + 1 < segments ? le32(8 + 4 * static_cast<std::size_t>(i)) : length;
    if (begin < 64 || begin >= end || end > length) {
      fail(name, "damaged RLE Pixel Data: segment " + std::to_string(i + 1) + " would span bytes " + std::to_string(begin) +
                     ".." + std::to_string(end) + " of a " + std::to_string(length) + "-byte fragment");
    }
    // The first PackBits packet that produces output must have its data inside the segment.
    Uint32 at = begin;
    while (at < end && data[at] == 0x80) ++at;  // -128: no operation
    if (at + 1 >= end) fail(name, "damaged RLE Pixel Data: segment " + std::to_string(i + 1) + " decodes to nothing");
  }
}

void check_transfer_syntax(const Header& h, const std::string& name) {
  const std::string& uid = h.info.transfer_syntax;
  const auto starts = [&](std::string_view prefix) { return uid.rfind(prefix, 0) == 0; };
  if (uid == "1.2.840.10008.1.2.4.90" || uid == "1.2.840.10008.1.2.4.91" || uid == "1.2.840.10008.1.2.4.92" ||
      uid == "1.2.840.10008.1.2.4.93") {
    fail(name, "JPEG 2000 (" + uid +
                   ") is not supported: DCMTK's free edition has no JPEG 2000 decoder; convert the file to an "
                   "uncompressed or another transfer syntax first (e.g. gdcmconv --raw)");
  }
  if (starts("1.2.840.10008.1.2.4.20")) {
    fail(name, "High-Throughput JPEG 2000 (" + uid + ") is not supported; convert the file first (e.g. gdcmconv --raw)");
  }
  if (starts("1.2.840.10008.1.2.4.10") || uid == "1.2.840.10008.1.2.4.94" || uid == "1.2.840.10008.1.2.4.95") {
    fail(name, "transfer syntax " + transfer_syntax_label(uid) + " (video or a JPIP reference) is not supported");
  }
  if (h.xfer == EXS_Unknown) fail(name, "transfer syntax " + uid + " is unknown to DCMTK");
}

cv::Mat decode_checked(std::span<const std::byte> bytes, const std::string& name) {
  require_part10(bytes, name);
  register_codecs();
  Parsed parsed;
  parse(parsed, bytes);
  if (parsed.status.bad()) fail(name, read_failure(parsed, bytes));
  DcmDataset& data = *parsed.file.getDataset();
  Header h = read_header(parsed, name);
  const DicomInfo& info = h.info;
  check_transfer_syntax(h, name);
  check_layout(info, name);

  DcmElement* element = nullptr;
  if (data.findAndGetElement(DCM_PixelData, element).bad() || element == nullptr) {
    const bool floats = data.tagExists(DCM_FloatPixelData) || data.tagExists(DCM_DoubleFloatPixelData);
    fail(name, floats ? "Float and Double Float Pixel Data are not supported"
                      : "no Pixel Data (7FE0,0010) in the file" +
                            (info.modality.empty() ? std::string() : " (Modality " + info.modality + ")"));
  }
  auto* pixel_data = dynamic_cast<DcmPixelData*>(element);
  if (pixel_data == nullptr) fail(name, "the Pixel Data element is malformed");

  const bool native = !DcmXfer(h.xfer).isEncapsulated();
  const bool ybr422_native = native && info.channels == 3 && info.photometric == "YBR_FULL_422";
  const std::uint64_t samples = static_cast<std::uint64_t>(info.width) * static_cast<std::uint64_t>(info.height) *
                                static_cast<std::uint64_t>(ybr422_native ? 2 : info.channels);
  const std::uint64_t frame_bytes = (samples * static_cast<std::uint64_t>(info.bits_allocated) + 7) / 8;

  std::vector<std::uint8_t> frame;
  OFString model;
  if (native) {
    // Uncompressed: the first frame is the first frame_bytes of the value, in the host's byte
    // order once DCMTK has swapped it (getUint8Array/getUint16Array swap OW from big endian).
    const Uint32 length = pixel_data->getLength();
    if (length < frame_bytes) {
      fail(name, "the Pixel Data has " + std::to_string(length) + " bytes, fewer than the " + std::to_string(frame_bytes) +
                     " of one " + std::to_string(info.width) + "x" + std::to_string(info.height) + " frame");
    }
    frame.resize(frame_bytes + 1);
    if (info.bits_allocated == 16 || info.bits_allocated == 32) {
      Uint16* words = nullptr;
      if (pixel_data->getUint16Array(words).bad() || words == nullptr) fail(name, "the Pixel Data cannot be read");
      if (info.bits_allocated == 32 && gLocalByteOrder == EBO_LittleEndian && DcmXfer(h.xfer).getByteOrder() == EBO_BigEndian) {
        // DCMTK swaps OW as 16-bit words; 32-bit samples still need their two words swapped.
        for (std::size_t i = 0; i + 1 < frame_bytes / 2; i += 2) {
          std::memcpy(frame.data() + 2 * i, words + i + 1, 2);
          std::memcpy(frame.data() + 2 * i + 2, words + i, 2);
        }
      } else {
        std::memcpy(frame.data(), words, frame_bytes);
      }
    } else {
      Uint8* bytes8 = nullptr;
      if (pixel_data->getUint8Array(bytes8).bad() || bytes8 == nullptr) fail(name, "the Pixel Data cannot be read");
      std::memcpy(frame.data(), bytes8, frame_bytes);
    }
    model = info.photometric.c_str();
  } else {
    if (h.xfer == EXS_RLELossless) check_rle(*pixel_data, h.xfer, info, name);
    Uint32 size = 0;
    if (pixel_data->getUncompressedFrameSize(&data, size).bad() || size == 0) {
      fail(name, "the size of a decompressed frame cannot be determined from the header");
    }
    if (size < frame_bytes) {
      fail(name, "DCMTK's decompressed frame (" + std::to_string(size) + " bytes) is smaller than the header says (" +
                     std::to_string(frame_bytes) + " bytes)");
    }
    frame.resize(static_cast<std::size_t>(size) + 2);
    Uint32 start_fragment = 0;
    const OFCondition status =
        pixel_data->getUncompressedFrame(&data, 0, start_fragment, frame.data(), static_cast<Uint32>(frame.size() & ~1U), model);
    if (status.bad()) {
      fail(name, "cannot decompress the first frame (" + transfer_syntax_label(info.transfer_syntax) +
                     "): damaged data, or a variant DCMTK does not decode (DCMTK: " + status.text() + ")");
    }
  }

  if (info.channels == 1) return monochrome(frame.data(), data, info, name);

  const std::string colour_model = model.c_str();
  if (colour_model != "RGB" && colour_model != "YBR_FULL" && !(ybr422_native && colour_model == "YBR_FULL_422")) {
    fail(name, "Photometric Interpretation " + (colour_model.empty() ? std::string("(none)") : colour_model) +
                   " with 3 samples per pixel is not supported (RGB, YBR_FULL and YBR_FULL_422 are)");
  }
  return colour(frame.data(), info, ybr422_native ? 0 : h.planar, colour_model);
}

}  // namespace

bool looks_like_dicom(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= preamble_size + 4 && bytes[preamble_size] == std::byte{'D'} &&
         bytes[preamble_size + 1] == std::byte{'I'} && bytes[preamble_size + 2] == std::byte{'C'} &&
         bytes[preamble_size + 3] == std::byte{'M'};
}

DicomInfo probe_dicom(std::span<const std::byte> bytes, const std::string& name) {
  require_part10(bytes, name);
  Parsed parsed;
  parse(parsed, bytes);
  // A file damaged or cut in its Pixel Data has a whole header.
  if (parsed.status.bad() && !has_pixel_data(parsed)) fail(name, read_failure(parsed, bytes));
  return read_header(parsed, name).info;
}

cv::Mat decode_dicom(std::span<const std::byte> bytes, const std::string& name) {
  try {
    return decode_checked(bytes, name);
  } catch (const DecodeError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw DecodeError(name, "DICOM: out of memory decoding the image");
  }
}

OtherFormatDecoder dicom_codec(OtherFormatDecoder others) {
  if (!others) return decode_dicom;
  return [others = std::move(others)](std::span<const std::byte> bytes, const std::string& name) {
    return looks_like_dicom(bytes) ? decode_dicom(bytes, name) : others(bytes, name);
  };
}

}  // namespace stoke::nodes
