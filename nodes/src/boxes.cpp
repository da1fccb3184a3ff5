#include "stoke/nodes/boxes.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace stoke::nodes {

void Boxes::add(std::array<float, 4> box, std::int32_t cls, std::span<const float> extra_values) {
  if (extra_values.size() != static_cast<std::size_t>(extras)) {
    throw std::invalid_argument("Boxes::add: " + std::to_string(extra_values.size()) + " extra values for boxes of " +
                                std::to_string(extras));
  }
  xyxy.push_back(box);
  classes.push_back(cls);
  extra.insert(extra.end(), extra_values.begin(), extra_values.end());
  visible.push_back(1.0f);
}

void Boxes::keep_if(const std::vector<bool>& keep) {
  std::size_t to = 0;
  const auto width = static_cast<std::size_t>(extras);
  for (std::size_t from = 0; from < size(); ++from) {
    if (!keep[from]) continue;
    xyxy[to] = xyxy[from];
    classes[to] = classes[from];
    visible[to] = visible[from];
    std::copy_n(extra.begin() + static_cast<std::ptrdiff_t>(from * width), width,
                extra.begin() + static_cast<std::ptrdiff_t>(to * width));
    ++to;
  }
  xyxy.resize(to);
  classes.resize(to);
  visible.resize(to);
  extra.resize(to * width);
}

void check_boxes(const Boxes& boxes, const std::string& what) {
  const auto fail = [&](const std::string& why) { throw std::invalid_argument(what + ": " + why); };
  const std::size_t n = boxes.size();
  if (boxes.xyxy.size() != n || boxes.visible.size() != n || boxes.extras < 0 ||
      boxes.extra.size() != n * static_cast<std::size_t>(boxes.extras)) {
    fail("the boxes' fields disagree in length (" + std::to_string(boxes.xyxy.size()) + " boxes, " +
         std::to_string(n) + " classes, " + std::to_string(boxes.visible.size()) + " visible fractions, " +
         std::to_string(boxes.extra.size()) + " extra values for " + std::to_string(boxes.extras) + " per box)");
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto& b = boxes.xyxy[i];
    if (!std::all_of(b.begin(), b.end(), [](float v) { return std::isfinite(v); }) || b[2] < b[0] || b[3] < b[1]) {
      fail("box " + std::to_string(i) + " is [" + std::to_string(b[0]) + ", " + std::to_string(b[1]) + ", " +
           std::to_string(b[2]) + ", " + std::to_string(b[3]) + "]; boxes are finite x0, y0, x1, y1 with x0 <= x1, y0 <= y1");
    }
    if (!(boxes.visible[i] >= 0.0f && boxes.visible[i] <= 1.0f))
      fail("box " + std::to_string(i) + " has a visible fraction of " + std::to_string(boxes.visible[i]));
  }
}

void crop_resize_boxes(Boxes& boxes, cv::Rect crop, cv::Size out) {
  if (boxes.empty()) return;
  // In double: the same results however the float inputs round on the way.
  const double sx = static_cast<double>(out.width) / crop.width;
  const double sy = static_cast<double>(out.height) / crop.height;
  std::vector<bool> keep(boxes.size());
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    auto& b = boxes.xyxy[i];
    const auto at = [&](std::size_t k, int origin, double scale) { return (static_cast<double>(b[k]) - origin) * scale; };
    const double x0 = at(0, crop.x, sx), y0 = at(1, crop.y, sy), x1 = at(2, crop.x, sx), y1 = at(3, crop.y, sy);
    const double cx0 = std::clamp(x0, 0.0, static_cast<double>(out.width));
    const double cy0 = std::clamp(y0, 0.0, static_cast<double>(out.height));
    const double cx1 = std::clamp(x1, 0.0, static_cast<double>(out.width));
    const double cy1 = std::clamp(y1, 0.0, static_cast<double>(out.height));
    const double area = (x1 - x0) * (y1 - y0);
    const double kept = (cx1 - cx0) * (cy1 - cy0);
    const bool inside = x0 <= out.width && y0 <= out.height && x1 >= 0 && y1 >= 0;
    keep[i] = area > 0 ? kept > 0 : inside;
    if (area > 0) boxes.visible[i] = static_cast<float>(static_cast<double>(boxes.visible[i]) * (kept / area));
    b = {static_cast<float>(cx0), static_cast<float>(cy0), static_cast<float>(cx1), static_cast<float>(cy1)};
  }
  boxes.keep_if(keep);
}

void flip_boxes_horizontally(Boxes& boxes, int width) {
  for (auto& b : boxes.xyxy) b = {static_cast<float>(width) - b[2], b[1], static_cast<float>(width) - b[0], b[3]};
}

std::size_t filter_boxes(Boxes& boxes, const BoxFilter& filter) {
  std::vector<bool> keep(boxes.size());
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const auto& b = boxes.xyxy[i];
    keep[i] = boxes.visible[i] >= filter.min_visible && b[2] - b[0] >= filter.min_size && b[3] - b[1] >= filter.min_size;
    dropped += keep[i] ? 0 : 1;
  }
  if (dropped > 0) boxes.keep_if(keep);
  return dropped;
}

}  // namespace stoke::nodes
