#include "stoke/nodes/decode_augment.hpp"

#include <utility>

namespace stoke::nodes {

DecodeAugment::DecodeAugment(Decoder decoder, Augment augment, bool fuse)
    : decoder_(std::move(decoder)), augment_(std::move(augment)), fuse_(fuse) {}

Image DecodeAugment::operator()(Sample sample) const {
  const auto& transforms = augment_.transforms();
  if (fuse_ && !transforms.empty()) {
    const bool cheap_probe =
        sample.encoding == Encoding::raw_rgb || detect_format(sample.bytes.span()) == ImageFormat::jpeg;
    if (cheap_probe) {
      ItemRng rng = augment_.rng_for(sample.epoch, sample.index);
      const ImageInfo info = decoder_.probe(sample);
      if (const auto region = transforms.front()->plan(cv::Size(info.width, info.height), rng)) {
        Image image = decoder_.decode(sample, *region);
        for (std::size_t i = 1; i < transforms.size(); ++i) (*transforms[i])(image, rng);
        return image;
      }
    }
  }
  // Augment starts from a fresh ItemRng for (epoch, index): the same numbers plan() drew above.
  return augment_(decoder_.decode(sample));
}

}  // namespace stoke::nodes
