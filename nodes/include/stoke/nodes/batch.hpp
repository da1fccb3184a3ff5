// Batch: N items collated into one host buffer, a slot of a BatchPool (see batch_pool.hpp), plus
// their labels, dataset indices and names. What the batch stage hands to to-device or to a CPU
// consumer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/image.hpp"

namespace stoke::nodes {

/// How a batch stores its pixels.
enum class BatchLayout : std::uint8_t {
  nhwc_u8,   ///< uint8, item-major, then rows, columns, interleaved channels (from hwc_u8 Images)
  nchw_f32,  ///< float, item-major, then channel planes of rows x columns (from chw_f32 Images)
};

/// "nhwc_u8" / "nchw_f32".
std::string_view to_string(BatchLayout layout) noexcept;

/// The Image layout whose pixels a batch of `layout` stores without conversion.
constexpr PixelLayout pixel_layout(BatchLayout layout) noexcept {
  return layout == BatchLayout::nhwc_u8 ? PixelLayout::hwc : PixelLayout::chw_f32;
}

/// The fixed shape of every batch of a pool. Sizes are in items and pixels.
struct BatchShape {
  std::size_t batch_size = 0;  ///< items per batch (a final partial batch holds fewer)
  int height = 0;
  int width = 0;
  int channels = 3;
  BatchLayout layout = BatchLayout::nhwc_u8;

  /// Bytes per element: 1 for nhwc_u8, 4 for nchw_f32.
  std::size_t element_size() const noexcept { return layout == BatchLayout::nhwc_u8 ? 1 : sizeof(float); }
  /// Elements (pixels x channels) per item.
  std::size_t item_elements() const noexcept {
    return static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  }
  std::size_t item_bytes() const noexcept { return item_elements() * element_size(); }
  /// Bytes of pixel data of a full batch.
  std::size_t data_bytes() const noexcept { return batch_size * item_bytes(); }

  /// Throws std::invalid_argument naming the bad field when a size is not positive.
  void validate() const;
  /// E.g. "64 x 224x224x3 nhwc_u8".
  std::string describe() const;

  friend bool operator==(const BatchShape&, const BatchShape&) = default;
};

namespace detail {

class PoolState;

/// One slot of a pool: memory allocated once, reused batch after batch. Owned by its PoolState.
struct BatchSlot {
  std::size_t id = 0;
  std::byte* block = nullptr;        // the allocation: data, then labels, then indices
  std::byte* data = nullptr;         // shape.data_bytes()
  std::int32_t* labels = nullptr;    // batch_size
  std::uint64_t* indices = nullptr;  // batch_size
  std::vector<std::string> names;    // batch_size, host memory (names never go to a device)
  std::size_t size = 0;
  std::uint32_t epoch = 0;
};

/// Gives a slot back to its pool (batch_pool.cpp). Thread-safe.
void release_slot(PoolState& pool, BatchSlot& slot) noexcept;

/// What an empty Batch points to, so that its accessors need no null checks (and give compilers
/// no null path to warn about): size 0, no memory. Never written.
inline BatchSlot empty_slot{};
inline const BatchShape empty_shape{};

}  // namespace detail

/// A slot of a BatchPool, filled with up to shape().batch_size items. Move-only; the destructor
/// (or release()) gives the slot back to its pool, which wakes one blocked acquire(). A Batch keeps
/// its pool's memory alive, so it may outlive the BatchPool handle it came from.
///
/// The accessors cover the first size() items. A default-constructed or moved-from Batch holds no
/// slot: valid() is false and every span is empty. Not thread-safe; hand it from stage to stage.
class Batch {
 public:
  Batch() noexcept = default;
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  ~Batch();

  bool valid() const noexcept { return pool_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  /// The pool's shape (capacity, item size, layout); all zero when empty.
  const BatchShape& shape() const noexcept { return *shape_; }
  /// Items it can hold (shape().batch_size); 0 when empty.
  std::size_t capacity() const noexcept { return shape_->batch_size; }
  /// Items filled: capacity() except for a final partial batch.
  std::size_t size() const noexcept { return slot_->size; }
  bool full() const noexcept { return valid() && slot_->size == shape_->batch_size; }
  /// Sets the number of filled items; the caller fills items [old size, n). Throws
  /// std::out_of_range when n > capacity() (or the batch is empty and n > 0).
  void set_size(std::size_t n);

  /// Pixel data of the filled items, size() * shape().item_bytes() bytes.
  std::span<std::byte> data() noexcept { return {slot_->data, data_size()}; }
  std::span<const std::byte> data() const noexcept { return {slot_->data, data_size()}; }
  /// Pixel data of item i (i < size()).
  std::span<std::byte> item(std::size_t i) noexcept {
    return data().subspan(i * shape_->item_bytes(), shape_->item_bytes());
  }
  std::span<const std::byte> item(std::size_t i) const noexcept {
    return data().subspan(i * shape_->item_bytes(), shape_->item_bytes());
  }
  /// The data as uint8 (nhwc_u8) or float (nchw_f32) elements. Throws std::logic_error naming
  /// both layouts when the batch has the other layout.
  std::span<std::uint8_t> u8();
  std::span<const std::uint8_t> u8() const;
  std::span<float> f32();
  std::span<const float> f32() const;

  /// Class labels of the filled items (-1: unlabelled).
  std::span<std::int32_t> labels() noexcept { return {slot_->labels, size()}; }
  std::span<const std::int32_t> labels() const noexcept { return {slot_->labels, size()}; }
  /// Dataset indices of the filled items.
  std::span<std::uint64_t> indices() noexcept { return {slot_->indices, size()}; }
  std::span<const std::uint64_t> indices() const noexcept { return {slot_->indices, size()}; }
  /// Names of the filled items (file paths), empty strings when the producer did not keep them.
  std::span<std::string> names() noexcept { return {slot_->names.data(), size()}; }
  std::span<const std::string> names() const noexcept { return {slot_->names.data(), size()}; }

  /// The epoch its items belong to.
  std::uint32_t epoch() const noexcept { return slot_->epoch; }
  /// Sets the epoch (ignored by an empty Batch).
  void set_epoch(std::uint32_t epoch) noexcept {
    if (valid()) slot_->epoch = epoch;
  }

  /// Which slot of the pool it occupies, in [0, pool slots): lets a consumer keep per-slot
  /// resources (a device buffer, an event). Precondition: valid().
  std::size_t slot() const noexcept { return slot_->id; }

  /// Gives the slot back now; the Batch becomes empty. Idempotent.
  void release() noexcept;

 private:
  friend class BatchPool;
  Batch(std::shared_ptr<detail::PoolState> pool, detail::BatchSlot* slot, const BatchShape* shape) noexcept
      : pool_(std::move(pool)), slot_(slot), shape_(shape) {}
  std::size_t data_size() const noexcept { return slot_->size * shape_->item_bytes(); }

  std::shared_ptr<detail::PoolState> pool_;
  detail::BatchSlot* slot_ = &detail::empty_slot;
  const BatchShape* shape_ = &detail::empty_shape;  // inside *pool_ while valid()
};

}  // namespace stoke::nodes
