// Batch: N items collated into one host block, a slot of a BatchPool (see batch_pool.hpp): their
// pixels (any channel count, uint8 to float32), and beside them a mask per item and named targets
// when the shape has them, labels, dataset indices and names. What the batch stage hands to
// to-device or to a CPU consumer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <opencv2/core/types.hpp>

#include "stoke/nodes/element_type.hpp"
#include "stoke/nodes/image.hpp"

namespace stoke::nodes {

/// How a batch stores its pixels.
enum class BatchLayout : std::uint8_t {
  nhwc,  ///< item-major, then rows, columns, interleaved channels (from hwc Images, any element type)
  nchw,  ///< item-major, then channel planes of rows x columns: float32 (from chw_f32 Images)
};

/// "nhwc" / "nchw".
std::string_view to_string(BatchLayout layout) noexcept;

/// The Image layout whose pixels a batch of `layout` stores without conversion.
constexpr PixelLayout pixel_layout(BatchLayout layout) noexcept {
  return layout == BatchLayout::nhwc ? PixelLayout::hwc : PixelLayout::chw_f32;
}

/// A named target's place in a batch: float32 values of `shape` per item (empty shape: a scalar).
struct TargetShape {
  std::string name;
  std::vector<std::int64_t> shape{};

  /// Values per item: the product of `shape` (1 for a scalar).
  std::size_t elements() const noexcept;
  friend bool operator==(const TargetShape&, const TargetShape&) = default;
};

/// The fixed shape of every batch of a pool: the pixels, and the fields beside them. Sizes are in
/// items and pixels.
///
///   BatchShape rgb{.batch_size = 64, .height = 224, .width = 224};          // uint8 NHWC RGB
///   BatchShape ct{.batch_size = 8, .height = 512, .width = 512, .channels = 1,
///                 .pixel_type = ElementType::i16, .mask = ElementType::u8,
///                 .targets = {{"age"}, {"findings", {14}}}};
///
/// Or take it from a sample: shape_of() in collate.hpp.
struct BatchShape {
  std::size_t batch_size = 0;  ///< items per batch (a final partial batch holds fewer)
  int height = 0;
  int width = 0;
  int channels = 3;
  BatchLayout layout = BatchLayout::nhwc;
  /// The pixels' element type: u8, u16, i16 or f32 for nhwc; f32 for nchw (normalized planes).
  ElementType pixel_type = ElementType::u8;
  /// The element type of a segmentation mask (height x width, one channel of class ids: u8, u16
  /// or i32) when the batch carries one.
  std::optional<ElementType> mask{};
  /// Named float32 targets, in this order in the batch (names unique).
  std::vector<TargetShape> targets{};
  /// Detection boxes: room for this many per item (0: the batch holds none). An item's boxes come
  /// first, the rest is padding (zeros, class -1); Batch::box_counts() says how many are real. An
  /// item with more is refused (raise it, or drop boxes with filter_boxes), so a slot's size is
  /// bounded by its largest allowed item.
  std::size_t max_boxes = 0;
  /// Extra float values per box (Boxes::extras); needs max_boxes > 0.
  int box_extras = 0;
  /// Items of any size up to height x width: each batch is padded to its largest item
  /// (Batch::extent()), every item at the top-left of its frame with zeros beyond it (class 0 in the
  /// mask), and each item's own size in Batch::item_sizes(). The slot is sized for the largest
  /// allowed, so memory stays bounded. Off: every item is exactly height x width.
  bool variable_size = false;

  /// Bytes per pixel element.
  std::size_t element_size() const noexcept { return nodes::element_size(pixel_type); }
  /// Elements (pixels x channels) per item.
  std::size_t item_elements() const noexcept {
    return static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  }
  std::size_t item_bytes() const noexcept { return item_elements() * element_size(); }
  /// Bytes of pixel data of a full batch.
  std::size_t data_bytes() const noexcept { return batch_size * item_bytes(); }
  /// Bytes of one item's mask (0 without a mask).
  std::size_t mask_item_bytes() const noexcept {
    return mask ? static_cast<std::size_t>(height) * static_cast<std::size_t>(width) * nodes::element_size(*mask) : 0;
  }
  /// Elements of one item's pixels in a frame of `extent` (height x width x channels).
  std::size_t frame_elements(cv::Size extent) const noexcept {
    return static_cast<std::size_t>(extent.height) * static_cast<std::size_t>(extent.width) *
           static_cast<std::size_t>(channels);
  }
  /// Room for boxes per item times `values` per box (0 without boxes).
  std::size_t box_values(std::size_t values) const noexcept { return max_boxes * values; }
  /// The position of the target called `name` in `targets`, or nullopt.
  std::optional<std::size_t> target_index(std::string_view name) const noexcept;

  /// Throws std::invalid_argument naming the bad field: a size that is not positive, an nchw
  /// batch of other than f32, a mask type that is not a class-id type, a target without a name,
  /// with a repeated name or a dimension that is not positive, box extras without boxes.
  void validate() const;
  /// E.g. "64 x 224x224x3 nhwc u8", "8 x 512x512x1 nhwc i16 + mask u8 + targets age, findings[14]".
  std::string describe() const;

  friend bool operator==(const BatchShape&, const BatchShape&) = default;
};

/// Where each field of a batch lies in one block of memory: byte offsets from the block's start,
/// each a multiple of the alignment asked for. The pixels come first (offset 0), then the mask,
/// labels (int32), indices (uint64), the targets (float32) in BatchShape::targets' order and the
/// boxes (corners, classes, extras, counts; empty parts without boxes). The
/// host pool and the device slots share it, so a field is one copy between them.
struct BatchBlock {
  std::size_t pixels = 0;
  std::size_t mask = 0;  ///< == labels when there is no mask
  std::size_t labels = 0;
  std::size_t indices = 0;
  std::vector<std::size_t> targets{};
  std::size_t boxes = 0;        ///< float [batch][max_boxes][4]
  std::size_t box_classes = 0;  ///< int32 [batch][max_boxes]
  std::size_t box_extras = 0;   ///< float [batch][max_boxes][box_extras]
  std::size_t box_counts = 0;   ///< int32 [batch]
  std::size_t item_sizes = 0;   ///< int32 [batch][2]: height, width (variable_size only)
  std::size_t bytes = 0;  ///< the whole block, padded to the alignment
};

/// The block layout of a full batch of `shape`, every field aligned to `alignment` (a power of 2).
BatchBlock block_layout(const BatchShape& shape, std::size_t alignment);

namespace detail {

class PoolState;

/// One slot of a pool: memory allocated once, reused batch after batch. Owned by its PoolState.
struct BatchSlot {
  std::size_t id = 0;
  std::byte* block = nullptr;        // the allocation, laid out by block_layout()
  std::byte* data = nullptr;         // shape.data_bytes()
  std::byte* mask = nullptr;         // batch_size * shape.mask_item_bytes()
  std::int32_t* labels = nullptr;    // batch_size
  std::uint64_t* indices = nullptr;  // batch_size
  std::vector<float*> targets;       // per target: batch_size * its elements()
  float* boxes = nullptr;            // batch_size * max_boxes * 4
  std::int32_t* box_classes = nullptr;
  float* box_extras = nullptr;
  std::int32_t* box_counts = nullptr;
  std::int32_t* item_sizes = nullptr;  // batch_size * 2 (variable_size)
  cv::Size extent;                     // the frame every item of the batch is laid out in
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

  /// The frame every item is laid out in: the shape's height x width, or with
  /// BatchShape::variable_size the largest item's size (what Collate sets with set_extent()).
  cv::Size extent() const noexcept { return slot_->extent; }
  /// Sets the frame (variable_size batches only: throws std::logic_error otherwise, and
  /// std::out_of_range when it exceeds the shape's height x width or is not positive). Set it before
  /// filling items: it moves where each item starts.
  void set_extent(cv::Size extent);
  /// Bytes of one item's pixels in the current frame.
  std::size_t item_bytes() const noexcept { return shape_->frame_elements(slot_->extent) * shape_->element_size(); }
  /// Each filled item's own height and width, [size()][2] (variable_size batches; empty otherwise).
  std::span<std::int32_t> item_sizes() noexcept { return {slot_->item_sizes, shape_->variable_size ? 2 * size() : 0}; }
  std::span<const std::int32_t> item_sizes() const noexcept {
    return {slot_->item_sizes, shape_->variable_size ? 2 * size() : 0};
  }

  /// Pixel data of the filled items, size() * item_bytes() bytes.
  std::span<std::byte> data() noexcept { return {slot_->data, data_size()}; }
  std::span<const std::byte> data() const noexcept { return {slot_->data, data_size()}; }
  /// Pixel data of item i (i < size()).
  std::span<std::byte> item(std::size_t i) noexcept {
    return data().subspan(i * item_bytes(), item_bytes());
  }
  std::span<const std::byte> item(std::size_t i) const noexcept { return data().subspan(i * item_bytes(), item_bytes()); }
  /// The pixel data as elements of type T (std::uint8_t, std::uint16_t, std::int16_t or float).
  /// Throws std::logic_error naming both types when the batch holds another pixel type.
  template <class T>
  std::span<T> pixels_as() {
    require_type(shape_->pixel_type, element_type_v<T>, "pixel");
    return {reinterpret_cast<T*>(slot_->data), data_size() / sizeof(T)};
  }
  template <class T>
  std::span<const T> pixels_as() const {
    require_type(shape_->pixel_type, element_type_v<T>, "pixel");
    return {reinterpret_cast<const T*>(slot_->data), data_size() / sizeof(T)};
  }
  /// pixels_as<std::uint8_t>() and pixels_as<float>().
  std::span<std::uint8_t> u8() { return pixels_as<std::uint8_t>(); }
  std::span<const std::uint8_t> u8() const { return pixels_as<std::uint8_t>(); }
  std::span<float> f32() { return pixels_as<float>(); }
  std::span<const float> f32() const { return pixels_as<float>(); }

  /// True when the batch carries a mask per item (shape().mask).
  bool has_mask() const noexcept { return shape_->mask.has_value(); }
  /// Bytes of one item's mask in the current frame (0 without masks).
  std::size_t mask_item_bytes() const noexcept {
    return shape_->mask ? static_cast<std::size_t>(slot_->extent.area()) * nodes::element_size(*shape_->mask) : 0;
  }
  /// The masks of the filled items, size() * mask_item_bytes() bytes (empty without masks).
  std::span<std::byte> mask() noexcept { return {slot_->mask, size() * mask_item_bytes()}; }
  std::span<const std::byte> mask() const noexcept { return {slot_->mask, size() * mask_item_bytes()}; }
  /// Item i's mask (i < size()).
  std::span<std::byte> mask_item(std::size_t i) noexcept {
    return mask().subspan(i * mask_item_bytes(), mask_item_bytes());
  }
  std::span<const std::byte> mask_item(std::size_t i) const noexcept {
    return mask().subspan(i * mask_item_bytes(), mask_item_bytes());
  }
  /// The masks as elements of type T (std::uint8_t, std::uint16_t or std::int32_t). Throws
  /// std::logic_error when the batch has no mask or one of another type.
  template <class T>
  std::span<T> mask_as() {
    require_mask_type(element_type_v<T>);
    const auto bytes = mask();
    return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
  template <class T>
  std::span<const T> mask_as() const {
    require_mask_type(element_type_v<T>);
    const auto bytes = mask();
    return {reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T)};
  }

  /// The values of target k (in shape().targets' order) of the filled items: size() x its
  /// elements(), item-major. Throws std::out_of_range for k >= shape().targets.size().
  std::span<float> target(std::size_t k);
  std::span<const float> target(std::size_t k) const;
  /// The values of the target called `name`. Throws std::out_of_range naming it and the targets
  /// the batch has.
  std::span<float> target(std::string_view name);
  std::span<const float> target(std::string_view name) const;

  /// Detection boxes of the filled items (shape().max_boxes > 0): corners x0, y0, x1, y1 as
  /// [size()][max_boxes][4], classes [size()][max_boxes], extras [size()][max_boxes][box_extras],
  /// and each item's number of real boxes (the rest is padding: zeros, class -1). Empty spans
  /// without boxes.
  bool has_boxes() const noexcept { return shape_->max_boxes > 0; }
  std::span<float> boxes() noexcept { return {slot_->boxes, size() * shape_->box_values(4)}; }
  std::span<const float> boxes() const noexcept { return {slot_->boxes, size() * shape_->box_values(4)}; }
  std::span<std::int32_t> box_classes() noexcept { return {slot_->box_classes, size() * shape_->box_values(1)}; }
  std::span<const std::int32_t> box_classes() const noexcept {
    return {slot_->box_classes, size() * shape_->box_values(1)};
  }
  std::span<float> box_extras() noexcept {
    return {slot_->box_extras, size() * shape_->box_values(static_cast<std::size_t>(shape_->box_extras))};
  }
  std::span<const float> box_extras() const noexcept {
    return {slot_->box_extras, size() * shape_->box_values(static_cast<std::size_t>(shape_->box_extras))};
  }
  std::span<std::int32_t> box_counts() noexcept { return {slot_->box_counts, has_boxes() ? size() : 0}; }
  std::span<const std::int32_t> box_counts() const noexcept { return {slot_->box_counts, has_boxes() ? size() : 0}; }

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
  std::size_t data_size() const noexcept { return slot_->size * item_bytes(); }
  /// Throws std::logic_error unless `wanted` is `held` (the batch's type of `field`).
  void require_type(ElementType held, std::optional<ElementType> wanted, const char* field) const;
  void require_mask_type(std::optional<ElementType> wanted) const;
  std::size_t target_position(std::string_view name) const;

  std::shared_ptr<detail::PoolState> pool_;
  detail::BatchSlot* slot_ = &detail::empty_slot;
  const BatchShape* shape_ = &detail::empty_shape;  // inside *pool_ while valid()
};

}  // namespace stoke::nodes
