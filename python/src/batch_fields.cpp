#include "batch_fields.hpp"

#include <utility>
#include <vector>

namespace stoke::python {

namespace {

// One exported tensor: DLPack's struct, the shape it points to and the batch it keeps alive.
struct Exported {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  BatchOwner owner;
};

void delete_exported(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

}  // namespace

DLDataType dl_type(train::FieldType type) noexcept {
  switch (type.kind) {
    case train::FieldType::Kind::floating:
      return {kDLFloat, type.bits, 1};
    case train::FieldType::Kind::signed_int:
      return {kDLInt, type.bits, 1};
    case train::FieldType::Kind::unsigned_int:
      break;
  }
  return {kDLUInt, type.bits, 1};
}

DLManagedTensor* dlpack_tensor(BatchOwner owner, const train::BatchField& field) {
  auto exported = std::make_unique<Exported>();
  exported->shape = field.shape;
  exported->owner = std::move(owner);
  DLTensor& t = exported->managed.dl_tensor;
  t.data = field.data;
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<std::int32_t>(exported->shape.size());
  t.dtype = dl_type(field.type);
  t.shape = exported->shape.data();
  t.strides = nullptr;  // C-contiguous
  t.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = delete_exported;
  return &exported.release()->managed;
}

}  // namespace stoke::python
