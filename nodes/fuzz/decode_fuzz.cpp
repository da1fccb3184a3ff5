// decode_fuzz: a libFuzzer harness for stoke's decoder (JPEG through libjpeg-turbo, the marker
// and EXIF parsers, the header readers of other formats, region decoding).
//
// Any outcome but an image or a DecodeError -- a crash, a sanitizer report, another exception,
// a hang -- is a bug. Build and run (see CMakeLists.txt next to this file):
//   CXX=clang++ cmake -S . -B build/fuzz -DSTOKE_FUZZ=ON -DSTOKE_SANITIZE=address -DSTOKE_CUDA=OFF
//   cmake --build build/fuzz --target decode_fuzz
//   build/fuzz/nodes/fuzz/decode_fuzz -max_total_time=300 -timeout=10 corpus/ /work/shared/data/photos
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stoke/nodes/decode.hpp"

namespace {

using stoke::nodes::DecodeError;
using stoke::nodes::Decoder;
using stoke::nodes::ImageInfo;
using stoke::nodes::Region;

// A small pixel limit keeps each input fast; other formats decode to a fixed picture so that
// their header readers and the region path run too.
Decoder make_decoder(bool strict, bool exif) {
  stoke::nodes::DecodeOptions options;
  options.max_pixels = 4'000'000;
  options.exif_orientation = exif;
  options.strict = strict;
  options.other_formats = [](std::span<const std::byte>, const std::string&) {
    return cv::Mat(7, 5, CV_8UC3, cv::Scalar(1, 2, 3));
  };
  return Decoder(options);
}

void exercise(const Decoder& decoder, const stoke::nodes::Sample& sample) {
  ImageInfo info;
  try {
    info = decoder.probe(sample);
  } catch (const DecodeError&) {
    return;
  }
  try {
    (void)decoder.decode(sample);
  } catch (const DecodeError&) {
  }
  if (info.width < 1 || info.height < 1) return;
  // A centred crop of half the size, to a quarter of it (DCT-scaled) and to a fixed size.
  const cv::Rect crop(info.width / 4, info.height / 4, std::max(1, info.width / 2), std::max(1, info.height / 2));
  for (const cv::Size out : {cv::Size(std::max(1, crop.width / 4), std::max(1, crop.height / 4)), cv::Size(16, 16)}) {
    try {
      (void)decoder.decode(sample, Region{crop, out});
    } catch (const DecodeError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Decoder strict = make_decoder(true, false);
  static const Decoder lenient = make_decoder(false, true);
  stoke::nodes::Sample sample;
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  sample.bytes = stoke::nodes::Bytes(std::vector<std::byte>(bytes, bytes + size));
  sample.name = "fuzz-input";
  exercise(strict, sample);
  exercise(lenient, sample);
  return 0;
}
