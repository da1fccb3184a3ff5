#include "stoke/nodes/filter_boxes.hpp"

#include <sstream>
#include <stdexcept>

namespace stoke::nodes {

FilterBoxes::FilterBoxes(BoxFilter filter) : filter_(filter) {
  if (!(filter.min_visible >= 0.0f && filter.min_visible <= 1.0f))
    throw std::invalid_argument("filter_boxes: min_visible must be in [0, 1], got " + std::to_string(filter.min_visible));
  if (!(filter.min_size >= 0.0f))
    throw std::invalid_argument("filter_boxes: min_size must be >= 0 pixels, got " + std::to_string(filter.min_size));
}

std::string FilterBoxes::describe() const {
  std::ostringstream out;
  out << "filter_boxes min_visible=" << filter_.min_visible << " min_size=" << filter_.min_size;
  return out.str();
}

void FilterBoxes::apply_impl(Image& image, ItemRng& /*rng*/) const { filter_boxes(image.boxes, filter_); }

}  // namespace stoke::nodes
