#include "dlpack_export.hpp"

#include <stdexcept>
#include <utility>

namespace stoke::python {

namespace {

// One exported tensor: DLPack's struct, the shape it points to and the batch it keeps alive.
struct Exported {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  BatchOwner owner;
};

// Called by the consumer (torch frees its tensor) or by the capsule when nobody consumed it. May
// run on any thread, with or without the GIL: it only drops a reference to the batch, whose slot
// goes back to its pool (thread-safe).
void delete_exported(DLManagedTensor* self) { delete static_cast<Exported*>(self->manager_ctx); }

// The capsule's destructor: a capsule still named "dltensor" was never consumed, so it owns the
// tensor; a consumer renames it "used_dltensor" and takes the ownership over.
void delete_capsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor") == 0) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed != nullptr) managed->deleter(managed);
}

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

PyObject* dlpack_capsule(BatchOwner owner, void* data, DLDataType type, std::vector<std::int64_t> shape) {
  auto exported = std::make_unique<Exported>();
  exported->shape = std::move(shape);
  exported->owner = std::move(owner);
  DLTensor& t = exported->managed.dl_tensor;
  t.data = data;
  t.device = {kDLCPU, 0};
  t.ndim = static_cast<std::int32_t>(exported->shape.size());
  t.dtype = type;
  t.shape = exported->shape.data();
  t.strides = nullptr;  // C-contiguous
  t.byte_offset = 0;
  exported->managed.manager_ctx = exported.get();
  exported->managed.deleter = delete_exported;
  PyObject* capsule = PyCapsule_New(&exported->managed, "dltensor", delete_capsule);
  if (capsule == nullptr) throw std::runtime_error("stoke: cannot make a DLPack capsule");
  (void)exported.release();  // the capsule owns it now
  return capsule;
}

}  // namespace stoke::python
