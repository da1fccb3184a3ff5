// Handing a Batch's fields to Python as DLPack capsules, without a copy: every tensor of a batch
// views its slot, and the slot goes back to its pool when the last of them is freed.
#pragma once

#include <Python.h>
#include <dlpack/dlpack.h>

#include <cstdint>
#include <memory>
#include <stoke/nodes/batch.hpp>
#include <vector>

namespace stoke::python {

/// What the tensors of one batch share: the batch (its slot) lives as long as any of them.
using BatchOwner = std::shared_ptr<const nodes::Batch>;

/// The DLPack element type of `type` (u8 -> uint8, i16, u16, i32, f32, ...).
DLDataType dl_type(nodes::ElementType type) noexcept;

/// A new PyCapsule named "dltensor" (the DLPack exchange protocol) over `data` with `shape`,
/// C-contiguous, on the CPU. The capsule or, once a consumer took it, the consumer's tensor keeps
/// `owner` alive. Throws std::runtime_error (with the Python error set) when Python cannot make it.
PyObject* dlpack_capsule(BatchOwner owner, void* data, DLDataType type, std::vector<std::int64_t> shape);

}  // namespace stoke::python
