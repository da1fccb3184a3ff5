// A Batch's fields as DLPack tensors that view its slot, shared by both bindings: the pybind11
// module wraps each in a PyCapsule itself, the C ABI hands it to ctypes, which does.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stoke/nodes/batch.hpp>
#include <string>
#include <vector>

namespace stoke::python {

/// What the tensors of one batch share: the batch (its slot) lives as long as any of them.
using BatchOwner = std::shared_ptr<const nodes::Batch>;

/// The DLPack element type of `type` (u8 -> uint8, i16, u16, i32, f32, ...).
DLDataType dl_type(nodes::ElementType type) noexcept;

/// One field of a batch: its name ("images", "labels", "indices", "mask", a target's name,
/// "boxes", ...), where its elements lie in the slot, their type and shape (C-contiguous).
struct BatchField {
  std::string name;
  void* data = nullptr;
  DLDataType type{};
  std::vector<std::int64_t> shape;
};

/// The fields of `batch`, images first, then labels and indices, then what its shape has (mask,
/// targets, boxes, item sizes). Indices are uint64 shown as int64 (torch has no uint64 before 2.3;
/// an index is below 2^63).
std::vector<BatchField> batch_fields(const nodes::Batch& batch);

/// The slot's whole block of memory (every field lies in it): its start and size in bytes. A page
/// aligned allocation of its own, so that it can be pinned (cudaHostRegister) once and reused.
struct SlotBlock {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
};
SlotBlock slot_block(const nodes::Batch& batch);

/// A DLPack tensor over `field` on the CPU that keeps `owner` alive until its deleter runs. The
/// deleter may run on any thread, with or without Python's GIL: it only drops a reference to the
/// batch, whose slot then goes back to its pool (thread-safe).
DLManagedTensor* dlpack_tensor(BatchOwner owner, const BatchField& field);

}  // namespace stoke::python
