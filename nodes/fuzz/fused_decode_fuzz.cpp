// fused_decode_fuzz: a libFuzzer harness for the fused decode + crop path (decode_augment.hpp):
// DecodeAugment plans a random_resized_crop (or a center_crop) from the header probe() reads,
// decodes only that region at a reduced DCT scale, then applies the remaining transforms. The
// input is an image file (JPEG mostly); it is also taken as raw RGB pixels, its first two bytes
// giving the width and height (1..32), which DecodeAugment fuses too.
//
// Any outcome but an image or a DecodeError -- a crash, a sanitizer report, another exception, a
// hang -- is a bug; so is a fused result of another size than the unfused one.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoke/nodes/center_crop.hpp"
#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/decode_augment.hpp"
#include "stoke/nodes/random_horizontal_flip.hpp"
#include "stoke/nodes/random_resized_crop.hpp"

namespace {

using namespace stoke::nodes;

Decoder make_decoder() {
  DecodeOptions options;
  options.max_pixels = 4'000'000;
  options.exif_orientation = true;
  options.strict = false;
  options.other_formats = [](std::span<const std::byte>, const std::string&) {
    return cv::Mat(7, 5, CV_8UC3, cv::Scalar(1, 2, 3));
  };
  return Decoder(options);
}

/// Runs `augment` fused and unfused on `sample`; both must succeed or both fail, at one size.
void exercise(const Decoder& decoder, const Augment& augment, const Sample& sample) {
  Image fused;
  Image plain;
  bool fused_ok = true;
  bool plain_ok = true;
  try {
    fused = DecodeAugment(decoder, augment, true)(sample);
  } catch (const DecodeError&) {
    fused_ok = false;
  }
  try {
    plain = DecodeAugment(decoder, augment, false)(sample);
  } catch (const DecodeError&) {
    plain_ok = false;
  }
  if (fused_ok && plain_ok && fused.pixels.size() != plain.pixels.size()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Decoder decoder = make_decoder();
  static const Augment crop({std::make_shared<RandomResizedCrop>(cv::Size(32, 32), RandomResizedCrop::Range{0.35, 1.0}),
                             std::make_shared<RandomHorizontalFlip>(0.5)},
                            7);
  static const Augment center({std::make_shared<CenterCrop>(cv::Size(24, 16))}, 7);
  const auto* bytes = reinterpret_cast<const std::byte*>(data);

  Sample sample;
  sample.bytes = Bytes(std::vector<std::byte>(bytes, bytes + size));
  sample.name = "fuzz-input";
  sample.index = size;
  exercise(decoder, crop, sample);
  exercise(decoder, center, sample);

  if (size >= 2) {
    Sample raw;
    raw.encoding = Encoding::raw_rgb;
    raw.width = 1 + data[0] % 32;
    raw.height = 1 + data[1] % 32;
    raw.bytes = Bytes(std::vector<std::byte>(bytes + 2, bytes + size));
    raw.name = "fuzz-raw";
    exercise(decoder, crop, raw);
  }
  return 0;
}
