// LoaderBatch: a batch as train::Loader hands it out -- its fields by name, each a C-contiguous
// array that views the batch's pool slot (no copy), with its element type and shape -- for code
// that passes batches on to another framework (stoke.Loader's DLPack tensors) without walking
// nodes::Batch's layout itself. The slot goes back to its pool when the LoaderBatch is destroyed.
//
//   while (std::optional<LoaderBatch> batch = loader.next()) {
//     if (!batch->valid()) break;                        // the epoch's end
//     for (const BatchField& f : batch->fields()) export_array(f.name, f.data, f.type, f.shape);
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stoke/nodes/batch.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace stoke::train {

/// An element type as DLPack and NumPy describe one: its kind and its width in bits.
struct FieldType {
  enum class Kind : std::uint8_t { signed_int, unsigned_int, floating };
  Kind kind = Kind::unsigned_int;
  std::uint8_t bits = 8;
  friend bool operator==(const FieldType&, const FieldType&) = default;
};

/// One field of a batch: its name ("images", "labels", "indices", "mask", a target's name,
/// "boxes", ...), where its elements lie in the slot, their type and shape (C-contiguous).
struct BatchField {
  std::string name;
  void* data = nullptr;
  FieldType type{};
  std::vector<std::int64_t> shape;
};

class LoaderBatch {
 public:
  /// The end of an epoch: valid() is false.
  LoaderBatch() = default;
  explicit LoaderBatch(nodes::Batch batch);

  bool valid() const noexcept { return batch_.valid(); }
  /// Items in the batch (the last of an epoch may hold fewer than the batch size).
  std::size_t size() const noexcept { return batch_.size(); }
  /// The epoch the batch belongs to (from 0).
  std::uint32_t epoch() const noexcept { return batch_.epoch(); }
  /// The items' names (their files), in batch order.
  std::span<const std::string> names() const noexcept { return batch_.names(); }

  /// The fields: images (NCHW or NHWC as the batch is laid out), labels (int32), indices (the
  /// dataset's, uint64 shown as int64: an index is below 2^63), then what the batch carries --
  /// mask, targets, boxes (boxes, box_classes, box_counts, box_extras), item_sizes.
  const std::vector<BatchField>& fields() const noexcept { return fields_; }
  /// The field called `name`, or nullptr.
  const BatchField* field(std::string_view name) const noexcept;
  /// The slot's whole block of memory, every field inside it: a page-aligned allocation of its
  /// own, so that it can be pinned once (cudaHostRegister) and reused.
  std::span<const std::byte> block() const noexcept;

  /// The batch itself, for code that speaks nodes' types.
  const nodes::Batch& batch() const noexcept { return batch_; }

 private:
  nodes::Batch batch_;
  std::vector<BatchField> fields_;
};

}  // namespace stoke::train
