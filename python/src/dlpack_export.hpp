// DLPack tensors as Python capsules (the pybind11 module's side of batch_fields.hpp).
#pragma once

#include <Python.h>
#include <dlpack/dlpack.h>

namespace stoke::python {

/// A new PyCapsule named "dltensor" (the DLPack exchange protocol) that owns `tensor`: the capsule
/// or, once a consumer took it, the consumer's tensor calls its deleter. On failure the tensor is
/// deleted and std::runtime_error thrown (with the Python error set).
PyObject* dlpack_capsule(DLManagedTensor* tensor);

}  // namespace stoke::python
