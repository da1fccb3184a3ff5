// dicom_fuzz: a libFuzzer harness for the DICOM codec (stoke::dicom, dicom_codec.hpp, DCMTK
// underneath): the input is a DICOM Part 10 file. It is recognised, probed, decoded directly and
// through a Decoder with dicom_codec() (whole, and a region). Built only when stoke::dicom is.
//
// Frames of more than 4,000,000 pixels (by the header) are probed but not decoded, as decode_fuzz
// caps its pixels, so that each input stays fast.
//
// Any outcome but a matrix or a DecodeError -- a crash, a sanitizer report, another exception, a
// hang -- is a bug; so is a decoded frame of another size than the header's.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/dicom_codec.hpp"

namespace {

using namespace stoke::nodes;

Decoder make_decoder() {
  DecodeOptions options;
  options.max_pixels = 4'000'000;
  options.other_formats = dicom_codec();
  options.color = DecodeColor::keep;
  return Decoder(options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Decoder decoder = make_decoder();
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  const bool dicom = looks_like_dicom(bytes);
  DicomInfo info;
  try {
    info = probe_dicom(bytes, "fuzz.dcm");
  } catch (const DecodeError&) {
    return 0;
  }
  if (!dicom || info.width < 1 || info.height < 1 || info.channels < 1) std::abort();
  if (static_cast<std::uint64_t>(info.width) * static_cast<std::uint64_t>(info.height) > 4'000'000) return 0;
  try {
    const cv::Mat frame = decode_dicom(bytes, "fuzz.dcm");
    if (frame.cols != info.width || frame.rows != info.height || frame.channels() != info.channels) std::abort();
  } catch (const DecodeError&) {
  }
  Sample sample;
  sample.bytes = Bytes(std::vector<std::byte>(bytes.begin(), bytes.end()));
  sample.name = "fuzz.dcm";
  try {
    (void)decoder.decode(sample);
    const cv::Rect crop(info.width / 4, info.height / 4, std::max(1, info.width / 2), std::max(1, info.height / 2));
    (void)decoder.decode(sample, Region{crop, cv::Size(8, 8)});
  } catch (const DecodeError&) {
  }
  return 0;
}
