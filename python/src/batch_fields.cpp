#include "batch_fields.hpp"

#include <stoke/nodes/batch_pool.hpp>
#include <utility>

namespace stoke::python {

namespace {

std::int64_t as_dim(std::size_t n) { return static_cast<std::int64_t>(n); }

// One exported tensor: DLPack's struct, the shape it points to and the batch it keeps alive.
struct Exported {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  BatchOwner owner;
};

void delete_exported(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

}  // namespace

DLDataType dl_type(nodes::ElementType type) noexcept {
  const auto bits = static_cast<std::uint8_t>(8 * nodes::element_size(type));
  switch (type) {
    case nodes::ElementType::f32:
      return {kDLFloat, bits, 1};
    case nodes::ElementType::i16:
    case nodes::ElementType::i32:
      return {kDLInt, bits, 1};
    default:
      return {kDLUInt, bits, 1};
  }
}

std::vector<BatchField> batch_fields(const nodes::Batch& b) {
  const nodes::BatchShape& shape = b.shape();
  const auto n = as_dim(b.size());
  const cv::Size frame = b.extent();
  std::vector<BatchField> out;
  const auto put = [&](std::string name, const void* data, DLDataType type, std::vector<std::int64_t> dims) {
    out.push_back({std::move(name), const_cast<void*>(data), type, std::move(dims)});
  };
  const std::vector<std::int64_t> pixels =
      shape.layout == nodes::BatchLayout::nchw
          ? std::vector<std::int64_t>{n, shape.channels, frame.height, frame.width}
          : std::vector<std::int64_t>{n, frame.height, frame.width, shape.channels};
  put("images", b.data().data(), dl_type(shape.pixel_type), pixels);
  put("labels", b.labels().data(), dl_type(nodes::ElementType::i32), {n});
  put("indices", b.indices().data(), {kDLInt, 64, 1}, {n});
  if (shape.mask) put("mask", b.mask().data(), dl_type(*shape.mask), {n, frame.height, frame.width});
  for (std::size_t k = 0; k < shape.targets.size(); ++k) {
    std::vector<std::int64_t> dims{n};
    dims.insert(dims.end(), shape.targets[k].shape.begin(), shape.targets[k].shape.end());
    put(shape.targets[k].name, b.target(k).data(), dl_type(nodes::ElementType::f32), std::move(dims));
  }
  if (shape.max_boxes > 0) {
    const auto boxes = as_dim(shape.max_boxes);
    put("boxes", b.boxes().data(), dl_type(nodes::ElementType::f32), {n, boxes, 4});
    put("box_classes", b.box_classes().data(), dl_type(nodes::ElementType::i32), {n, boxes});
    put("box_counts", b.box_counts().data(), dl_type(nodes::ElementType::i32), {n});
    if (shape.box_extras > 0)
      put("box_extras", b.box_extras().data(), dl_type(nodes::ElementType::f32), {n, boxes, shape.box_extras});
  }
  if (shape.variable_size) put("item_sizes", b.item_sizes().data(), dl_type(nodes::ElementType::i32), {n, 2});
  return out;
}

SlotBlock slot_block(const nodes::Batch& batch) {
  // The pixels lie at the block's start (block_layout: offset 0).
  return {reinterpret_cast<std::uintptr_t>(batch.data().data()),
          nodes::block_layout(batch.shape(), nodes::BatchPool::part_alignment).bytes};
}

DLManagedTensor* dlpack_tensor(BatchOwner owner, const BatchField& field) {
  auto exported = std::make_unique<Exported>();
  exported->shape = field.shape;
  exported->owner = std::move(owner);
  DLTensor& t = exported->managed.dl_tensor;
  t.data = field.data;
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<std::int32_t>(exported->shape.size());
  t.dtype = field.type;
  t.shape = exported->shape.data();
  t.strides = nullptr;  // C-contiguous
  t.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = delete_exported;
  return &exported.release()->managed;
}

}  // namespace stoke::python
