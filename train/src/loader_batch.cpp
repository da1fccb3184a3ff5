#include "stoke/train/loader_batch.hpp"

#include <stoke/nodes/batch_pool.hpp>
#include <utility>

namespace stoke::train {

namespace {

std::int64_t as_dim(std::size_t n) { return static_cast<std::int64_t>(n); }

FieldType field_type(nodes::ElementType type) noexcept {
  const auto bits = static_cast<std::uint8_t>(8 * nodes::element_size(type));
  switch (type) {
    case nodes::ElementType::f32:
      return {FieldType::Kind::floating, bits};
    case nodes::ElementType::i16:
    case nodes::ElementType::i32:
      return {FieldType::Kind::signed_int, bits};
    default:
      return {FieldType::Kind::unsigned_int, bits};
  }
}

std::vector<BatchField> fields_of(const nodes::Batch& b) {
  const nodes::BatchShape& shape = b.shape();
  const auto n = as_dim(b.size());
  const cv::Size frame = b.extent();
  std::vector<BatchField> out;
  const auto put = [&](std::string name, const void* data, nodes::ElementType type, std::vector<std::int64_t> dims) {
    out.push_back({std::move(name), const_cast<void*>(data), field_type(type), std::move(dims)});
  };
  const std::vector<std::int64_t> pixels =
      shape.layout == nodes::BatchLayout::nchw
          ? std::vector<std::int64_t>{n, shape.channels, frame.height, frame.width}
          : std::vector<std::int64_t>{n, frame.height, frame.width, shape.channels};
  put("images", b.data().data(), shape.pixel_type, pixels);
  put("labels", b.labels().data(), nodes::ElementType::i32, {n});
  out.push_back({"indices", const_cast<std::uint64_t*>(b.indices().data()), {FieldType::Kind::signed_int, 64}, {n}});
  if (shape.mask) put("mask", b.mask().data(), *shape.mask, {n, frame.height, frame.width});
  for (std::size_t k = 0; k < shape.targets.size(); ++k) {
    std::vector<std::int64_t> dims{n};
    dims.insert(dims.end(), shape.targets[k].shape.begin(), shape.targets[k].shape.end());
    put(shape.targets[k].name, b.target(k).data(), nodes::ElementType::f32, std::move(dims));
  }
  if (shape.max_boxes > 0) {
    const auto boxes = as_dim(shape.max_boxes);
    put("boxes", b.boxes().data(), nodes::ElementType::f32, {n, boxes, 4});
    put("box_classes", b.box_classes().data(), nodes::ElementType::i32, {n, boxes});
    put("box_counts", b.box_counts().data(), nodes::ElementType::i32, {n});
    if (shape.box_extras > 0)
      put("box_extras", b.box_extras().data(), nodes::ElementType::f32, {n, boxes, shape.box_extras});
  }
  if (shape.variable_size) put("item_sizes", b.item_sizes().data(), nodes::ElementType::i32, {n, 2});
  return out;
}

}  // namespace

LoaderBatch::LoaderBatch(nodes::Batch batch) : batch_(std::move(batch)) {
  if (batch_.valid()) fields_ = fields_of(batch_);
}

const BatchField* LoaderBatch::field(std::string_view name) const noexcept {
  for (const BatchField& f : fields_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::span<const std::byte> LoaderBatch::block() const noexcept {
  if (!batch_.valid()) return {};
  // The pixels lie at the block's start (block_layout: offset 0).
  const auto* start = reinterpret_cast<const std::byte*>(batch_.data().data());
  return {start, nodes::block_layout(batch_.shape(), nodes::BatchPool::part_alignment).bytes};
}

}  // namespace stoke::train
