#include "stoke/nodes/batch.hpp"

#include <opencv2/core/hal/interface.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace stoke::nodes {

static_assert(cv_depth(ElementType::u8) == CV_8U && cv_depth(ElementType::u16) == CV_16U &&
              cv_depth(ElementType::i16) == CV_16S && cv_depth(ElementType::i32) == CV_32S &&
              cv_depth(ElementType::f32) == CV_32F);

std::string_view to_string(BatchLayout layout) noexcept {
  switch (layout) {
    case BatchLayout::nhwc:
      return "nhwc";
    case BatchLayout::nchw:
      return "nchw";
  }
  return "unknown";
}

std::size_t TargetShape::elements() const noexcept {
  std::size_t n = 1;
  for (std::int64_t d : shape) n *= d > 0 ? static_cast<std::size_t>(d) : 0;
  return n;
}

std::optional<std::size_t> BatchShape::target_index(std::string_view name) const noexcept {
  for (std::size_t k = 0; k < targets.size(); ++k)
    if (targets[k].name == name) return k;
  return std::nullopt;
}

void BatchShape::validate() const {
  const auto bad = [this](const std::string& what) {
    return std::invalid_argument("batch shape " + describe() + ": " + what);
  };
  if (batch_size == 0) throw bad("batch_size must be positive");
  if (height <= 0) throw bad("height must be positive");
  if (width <= 0) throw bad("width must be positive");
  if (channels <= 0) throw bad("channels must be positive");
  if (layout != BatchLayout::nhwc && layout != BatchLayout::nchw)
    throw bad("unknown layout " + std::to_string(static_cast<int>(layout)));
  if (layout == BatchLayout::nchw && pixel_type != ElementType::f32)
    throw bad("nchw batches hold normalized float planes: set pixel_type = f32");
  if (pixel_type == ElementType::i32) throw bad("pixels must be u8, u16, i16 or f32 (i32 is a mask type)");
  if (mask && *mask != ElementType::u8 && *mask != ElementType::u16 && *mask != ElementType::i32)
    throw bad("a mask holds class ids: u8, u16 or i32, not " + std::string(to_string(*mask)));
  if (box_extras < 0) throw bad("box_extras must not be negative");
  if (box_extras > 0 && max_boxes == 0) throw bad("box_extras needs max_boxes > 0");
  for (std::size_t k = 0; k < targets.size(); ++k) {
    const TargetShape& target = targets[k];
    if (target.name.empty()) throw bad("target " + std::to_string(k) + " has no name");
    if (target_index(target.name) != k) throw bad("target '" + target.name + "' is named twice");
    for (std::int64_t d : target.shape)
      if (d <= 0) throw bad("target '" + target.name + "' has a dimension that is not positive");
  }
}

std::string BatchShape::describe() const {
  std::string text = std::to_string(batch_size) + " x " + std::to_string(height) + "x" + std::to_string(width) + "x" +
                     std::to_string(channels) + " " + std::string(to_string(layout)) + " " +
                     std::string(to_string(pixel_type));
  if (mask) text += " + mask " + std::string(to_string(*mask));
  for (std::size_t k = 0; k < targets.size(); ++k) {
    text += k == 0 ? " + targets " : ", ";
    text += targets[k].name;
    if (!targets[k].shape.empty()) {
      text += "[";
      for (std::size_t d = 0; d < targets[k].shape.size(); ++d)
        text += (d ? "x" : "") + std::to_string(targets[k].shape[d]);
      text += "]";
    }
  }
  if (variable_size) text += " (variable size, up to " + std::to_string(height) + "x" + std::to_string(width) + ")";
  if (max_boxes > 0) {
    text += " + boxes " + std::to_string(max_boxes);
    if (box_extras > 0) text += " (" + std::to_string(box_extras) + (box_extras == 1 ? " extra)" : " extras)");
  }
  return text;
}

BatchBlock block_layout(const BatchShape& shape, std::size_t alignment) {
  const auto align_up = [alignment](std::size_t n) { return (n + alignment - 1) / alignment * alignment; };
  BatchBlock block;
  std::size_t at = align_up(shape.data_bytes());
  block.mask = at;
  at = align_up(at + shape.batch_size * shape.mask_item_bytes());
  block.labels = at;
  at = align_up(at + shape.batch_size * sizeof(std::int32_t));
  block.indices = at;
  at = align_up(at + shape.batch_size * sizeof(std::uint64_t));
  for (const TargetShape& target : shape.targets) {
    block.targets.push_back(at);
    at = align_up(at + shape.batch_size * target.elements() * sizeof(float));
  }
  const auto part = [&](std::size_t& offset, std::size_t bytes) {
    offset = at;
    at = align_up(at + bytes);
  };
  part(block.boxes, shape.batch_size * shape.box_values(4) * sizeof(float));
  part(block.box_classes, shape.batch_size * shape.box_values(1) * sizeof(std::int32_t));
  part(block.box_extras,
       shape.batch_size * shape.box_values(static_cast<std::size_t>(shape.box_extras)) * sizeof(float));
  part(block.box_counts, shape.max_boxes > 0 ? shape.batch_size * sizeof(std::int32_t) : 0);
  part(block.item_sizes, shape.variable_size ? 2 * shape.batch_size * sizeof(std::int32_t) : 0);
  block.bytes = at;
  return block;
}

Batch::Batch(Batch&& other) noexcept
    : pool_(std::move(other.pool_)),
      slot_(std::exchange(other.slot_, &detail::empty_slot)),
      shape_(std::exchange(other.shape_, &detail::empty_shape)) {}

Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::move(other.pool_);
    slot_ = std::exchange(other.slot_, &detail::empty_slot);
    shape_ = std::exchange(other.shape_, &detail::empty_shape);
  }
  return *this;
}

Batch::~Batch() { release(); }

void Batch::release() noexcept {
  if (valid()) detail::release_slot(*pool_, *std::exchange(slot_, &detail::empty_slot));
  shape_ = &detail::empty_shape;
  pool_.reset();  // may free the pool's memory, when the pool itself is gone
}

void Batch::set_size(std::size_t n) {
  if (n > capacity())
    throw std::out_of_range("Batch::set_size: " + std::to_string(n) + " items do not fit a batch of " +
                            std::to_string(capacity()));
  if (valid()) slot_->size = n;
}

void Batch::set_extent(cv::Size extent) {
  if (!valid()) return;
  if (!shape_->variable_size)
    throw std::logic_error("Batch::set_extent: the batch is not variable_size (" + shape_->describe() + ")");
  if (extent.width <= 0 || extent.height <= 0 || extent.width > shape_->width || extent.height > shape_->height)
    throw std::out_of_range("Batch::set_extent: " + std::to_string(extent.width) + "x" + std::to_string(extent.height) +
                            " is outside 1x1 .. " + std::to_string(shape_->width) + "x" +
                            std::to_string(shape_->height));
  slot_->extent = extent;
}

void Batch::require_type(ElementType held, std::optional<ElementType> wanted, const char* field) const {
  if (valid() && wanted != held)
    throw std::logic_error("Batch: asked for " + std::string(wanted ? to_string(*wanted) : "unknown") + " " + field +
                           " data but the batch holds " + std::string(to_string(held)) + " (" + shape_->describe() +
                           ")");
}

void Batch::require_mask_type(std::optional<ElementType> wanted) const {
  if (!valid()) return;
  if (!shape_->mask)
    throw std::logic_error("Batch: asked for masks but the batch has none (" + shape_->describe() + ")");
  require_type(*shape_->mask, wanted, "mask");
}

std::span<float> Batch::target(std::size_t k) {
  const auto values = std::as_const(*this).target(k);
  return {const_cast<float*>(values.data()), values.size()};
}

std::span<const float> Batch::target(std::size_t k) const {
  if (k >= shape_->targets.size())
    throw std::out_of_range("Batch::target: target " + std::to_string(k) + " of a batch with " +
                            std::to_string(shape_->targets.size()) + " targets");
  return {slot_->targets[k], size() * shape_->targets[k].elements()};
}

std::size_t Batch::target_position(std::string_view name) const {
  if (const auto k = shape_->target_index(name)) return *k;
  std::string known;
  for (const TargetShape& target : shape_->targets) known += (known.empty() ? "" : ", ") + target.name;
  throw std::out_of_range("Batch::target: the batch has no target '" + std::string(name) + "' (" +
                          (known.empty() ? std::string("it has none") : "it has " + known) + ")");
}

std::span<float> Batch::target(std::string_view name) { return target(target_position(name)); }
std::span<const float> Batch::target(std::string_view name) const { return target(target_position(name)); }

}  // namespace stoke::nodes
