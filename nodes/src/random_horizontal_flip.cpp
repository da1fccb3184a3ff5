#include "stoke/nodes/random_horizontal_flip.hpp"

#include <opencv2/core.hpp>
#include <sstream>
#include <stdexcept>

#include "stoke/nodes/recycling_allocator.hpp"

namespace stoke::nodes {

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  if (!(p >= 0 && p <= 1)) {
    std::ostringstream message;
    message << "random_horizontal_flip: p must be in [0, 1], got " << p;
    throw std::invalid_argument(message.str());
  }
}

std::string RandomHorizontalFlip::describe() const {
  std::ostringstream out;
  out << "random_horizontal_flip p=" << p_;
  return out.str();
}

void RandomHorizontalFlip::apply_impl(Image& image, ItemRng& rng) const {
  if (!rng.bernoulli(p_)) return;
  // Flipping every row mirrors each plane of a CHW image as well. Out of place: the source
  // buffer may be shared (e.g. with a cache).
  flip_boxes_horizontally(image.boxes, image.width());
  cv::Mat flipped = recycled_mat();
  cv::flip(image.pixels, flipped, 1);
  image.pixels = std::move(flipped);
  if (!image.mask.empty()) {
    cv::Mat mask;
    cv::flip(image.mask, mask, 1);
    image.mask = std::move(mask);
  }
}

}  // namespace stoke::nodes
