#include "dlpack_export.hpp"

#include <stdexcept>

namespace stoke::python {

namespace {

// The capsule's destructor: a capsule still named "dltensor" was never consumed, so it owns the
// tensor; a consumer renames it "used_dltensor" and takes the ownership over.
void delete_capsule(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor") == 0) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed != nullptr) managed->deleter(managed);
}

}  // namespace

PyObject* dlpack_capsule(DLManagedTensor* tensor) {
  PyObject* capsule = PyCapsule_New(tensor, "dltensor", delete_capsule);
  if (capsule == nullptr) {
    tensor->deleter(tensor);
    throw std::runtime_error("stoke: cannot make a DLPack capsule");
  }
  return capsule;
}

}  // namespace stoke::python
