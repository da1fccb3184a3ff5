// A LoaderBatch's fields (train/loader_batch.hpp) as DLPack tensors that view its slot, shared by
// both bindings: the pybind11 module wraps each in a PyCapsule itself, the C ABI hands it to ctypes,
// which does.
#pragma once

#include <dlpack/dlpack.h>

#include <memory>
#include <stoke/train/loader_batch.hpp>

namespace stoke::python {

/// What the tensors of one batch share: the batch (its slot) lives as long as any of them.
using BatchOwner = std::shared_ptr<const train::LoaderBatch>;

/// The DLPack element type of `type` (unsigned 8 -> uint8, signed 32 -> int32, floating 32 -> float32).
DLDataType dl_type(train::FieldType type) noexcept;

/// A DLPack tensor over `field` on the CPU that keeps `owner` alive until its deleter runs. The
/// deleter may run on any thread, with or without Python's GIL: it only drops a reference to the
/// batch, whose slot then goes back to its pool (thread-safe).
DLManagedTensor* dlpack_tensor(BatchOwner owner, const train::BatchField& field);

}  // namespace stoke::python
