// DecodeAugment: the decode + augment map stage of an image pipeline, Sample -> Image, which fuses
// a leading crop-and-resize transform into JPEG decoding.
//
//   Augment augment({std::make_shared<RandomResizedCrop>(cv::Size(224, 224)), ...}, seed);
//   pipe.source(...).map("decode", DecodeAugment(Decoder(), augment), {.concurrency = parallel(8)})...
#pragma once

#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/image.hpp"
#include "stoke/nodes/sample.hpp"
#include "stoke/nodes/transform.hpp"

namespace stoke::nodes {

/// Decodes a Sample and applies an Augment to it.
///
/// With `fuse` (the default) it asks the first transform for its Region (Transform::plan) given
/// the size probe() reads from the header, decodes only that region at a reduced DCT scale
/// (Decoder::decode(sample, region)), then applies the remaining transforms with the same ItemRng.
/// Since plan() draws the same random numbers as applying the transform would, the fused and
/// unfused paths crop the same rectangle; their pixels differ only by the decoder's DCT scaling.
/// When the first transform cannot be fused (plan() gives nullopt), the input is not a JPEG or raw
/// RGB (probing other formats is not cheaper than decoding them), or there are no transforms, it
/// decodes the whole image and applies every transform, exactly as without `fuse`.
///
/// Copyable; immutable and thread-safe when the Decoder and the transforms are (as stoke's are).
class DecodeAugment {
 public:
  DecodeAugment(Decoder decoder, Augment augment, bool fuse = true);

  /// Throws what the decoder and the transforms throw (DecodeError for bad input).
  Image operator()(Sample sample) const;

  const Decoder& decoder() const noexcept { return decoder_; }
  const Augment& augment() const noexcept { return augment_; }
  bool fuse() const noexcept { return fuse_; }

 private:
  Decoder decoder_;
  Augment augment_;
  bool fuse_;
};

}  // namespace stoke::nodes
