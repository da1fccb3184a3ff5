#include "stoke/nodes/transform.hpp"

#include <stdexcept>

namespace stoke::nodes {

namespace {
const char* layout_name(PixelLayout layout) {
  return layout == PixelLayout::hwc ? "HWC" : "float CHW (normalized)";
}
}  // namespace

std::string Transform::refuses(const Image& image) const {
  if (accepts(image.layout)) return {};
  if (image.layout == PixelLayout::chw_f32 && normalization())
    return "the image is already normalized (float CHW); list normalize once, last";
  return std::string("cannot take a ") + layout_name(image.layout) + " image; put it before normalize";
}

void Transform::operator()(Image& image, ItemRng& rng) const {
  const std::string what(name());
  if (image.pixels.empty()) throw std::invalid_argument(what + ": " + item_name(image) + ": empty image");
  check_fields(image, what);
  if (const std::string why = refuses(image); !why.empty()) throw std::invalid_argument(what + ": " + why);
  apply_impl(image, rng);
}

std::optional<Region> Transform::plan(cv::Size /*source*/, ItemRng& /*rng*/) const { return std::nullopt; }

Augment::Augment(std::vector<TransformPtr> transforms, std::uint64_t seed)
    : transforms_(std::move(transforms)), seed_(seed) {
  for (const auto& t : transforms_) {
    if (!t) throw std::invalid_argument("Augment: null transform");
  }
}

Image Augment::operator()(Image image) const {
  ItemRng rng = rng_for(image.epoch, image.index);
  for (const auto& t : transforms_) (*t)(image, rng);
  return image;
}

}  // namespace stoke::nodes
