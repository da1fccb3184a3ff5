// DeviceBatch: a batch on the device that computes on it. Made by the to-device stage from a host
// Batch (nodes/batch.hpp); consumed by the compute stage.
//
// On a CUDA device its pixels and labels are in device memory (a slot of the to-device stage's
// pool), and `ready()` is the event that marks the end of their copy: work that reads them is
// enqueued after `stream.wait(*batch.ready())` (the compute stage does that). On the CPU device it
// wraps the host batch itself, and there is nothing to wait for. Either way the slot goes back to
// its pool when the DeviceBatch is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/dtype.hpp"
#include "stoke/nodes/batch.hpp"

namespace stoke::gpu {

class Event;

namespace detail {
class DeviceSlots;
class ComputeEngine;
struct DeviceSlot;
}  // namespace detail

/// The DType of a batch field's element type (u8, u16, i16, i32, f32: the same names).
DType to_dtype(nodes::ElementType type) noexcept;

/// A view of a batch field as a 4-d tensor: the raw pixels (NHWC of the batch's pixel type, or
/// normalized NCHW float), what the compute stage converted them to (see convert.hpp), or the
/// masks (NHWC, one channel). `data` is device memory on a CUDA device.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::u8;
  TensorLayout layout = TensorLayout::nhwc;
  std::size_t n = 0;  ///< items (the batch's size(), not its capacity)
  int c = 0;
  int h = 0;
  int w = 0;

  std::size_t elements() const noexcept {
    return n * static_cast<std::size_t>(c) * static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  }
  std::size_t bytes() const noexcept { return elements() * element_size(dtype); }
};

/// Move-only. A default-constructed or moved-from DeviceBatch is empty (valid() false).
class DeviceBatch {
 public:
  DeviceBatch() noexcept;
  ~DeviceBatch();
  DeviceBatch(DeviceBatch&& other) noexcept;
  DeviceBatch& operator=(DeviceBatch&& other) noexcept;
  DeviceBatch(const DeviceBatch&) = delete;
  DeviceBatch& operator=(const DeviceBatch&) = delete;

  /// The CPU device's DeviceBatch: the host batch itself, moved in.
  explicit DeviceBatch(nodes::Batch host);

  bool valid() const noexcept { return slot_ != nullptr || host_.valid(); }
  Device device() const noexcept { return device_; }
  /// The host pool's shape: capacity, item size, layout.
  const nodes::BatchShape& shape() const noexcept { return shape_; }
  /// Items in the batch (a final partial batch holds fewer than shape().batch_size).
  std::size_t size() const noexcept { return labels_.size(); }
  std::uint32_t epoch() const noexcept { return epoch_; }
  /// Its position in the stream of batches that crossed to the device (0, 1, 2, ...).
  std::uint64_t sequence() const noexcept { return sequence_; }

  /// The pixels as they crossed (NHWC of the batch's pixel type, or float NCHW, as the host batch
  /// was), on the device.
  TensorView pixels() const noexcept;
  /// The masks (n x h x w x 1 class ids of the shape's mask type), on the device; an empty view
  /// (data null) when the batch has none.
  TensorView mask() const noexcept;
  /// Target k (in shape().targets' order), or the target called `name`: size() x its elements()
  /// float32 values, item-major, on the device (host memory on the CPU device). Throws
  /// std::out_of_range for a target the batch does not have.
  const float* device_target(std::size_t k) const;
  const float* device_target(std::string_view name) const;
  /// Detection boxes as nodes::Batch lays them out (corners [n][max_boxes][4], classes, extras,
  /// counts [n]), on the device; null without boxes (shape().max_boxes == 0).
  struct BoxFields {
    const float* corners = nullptr;
    const std::int32_t* classes = nullptr;
    const float* extras = nullptr;
    const std::int32_t* counts = nullptr;
  };
  const BoxFields& device_boxes() const noexcept { return boxes_; }
  /// The frame the items are laid out in (nodes::Batch::extent(): the shape's size, or a variable-
  /// size batch's largest item), which pixels() and mask() report as h and w.
  int extent_height() const noexcept { return extent_h_; }
  int extent_width() const noexcept { return extent_w_; }
  /// A variable-size batch's item sizes, [size()][2] (height, width): host copies, and on the
  /// device (null when the shape is not variable_size).
  std::span<const std::int32_t> item_sizes() const noexcept { return item_sizes_; }
  const std::int32_t* device_item_sizes() const noexcept { return device_item_sizes_; }
  /// What the compute callable should read: pixels(), or their conversion when the compute stage
  /// converts (ComputeOptions::convert).
  const TensorView& input() const noexcept { return input_; }
  void set_input(TensorView input) noexcept { input_ = input; }

  /// Labels in the device's memory (host memory on the CPU device), size() of them.
  const std::int32_t* device_labels() const noexcept { return device_labels_; }
  /// Host copies of the labels, dataset indices and names (for metrics and reports).
  std::span<const std::int32_t> labels() const noexcept { return labels_; }
  std::span<const std::uint64_t> indices() const noexcept { return indices_; }
  std::span<const std::string> names() const noexcept { return names_; }

  /// The event recorded after the copy (null on the CPU device).
  const Event* ready() const noexcept;
  /// Which slot of the device pool it occupies (0 on the CPU device).
  std::size_t slot() const noexcept;

  /// Gives the slot back now; the DeviceBatch becomes empty. Precondition on a CUDA device: no
  /// enqueued work still reads it. Idempotent.
  void release() noexcept;

 private:
  friend class detail::DeviceSlots;
  friend class detail::ComputeEngine;
  void take_metadata(nodes::Batch& batch);

  Device device_;
  nodes::BatchShape shape_;
  std::uint32_t epoch_ = 0;
  std::uint64_t sequence_ = 0;
  std::vector<std::int32_t> labels_;
  std::vector<std::uint64_t> indices_;
  std::vector<std::string> names_;
  std::byte* data_ = nullptr;
  const std::int32_t* device_labels_ = nullptr;
  std::byte* mask_ = nullptr;
  std::vector<const float*> targets_;
  BoxFields boxes_;
  int extent_h_ = 0;
  int extent_w_ = 0;
  std::vector<std::int32_t> item_sizes_;
  const std::int32_t* device_item_sizes_ = nullptr;
  TensorView input_;
  nodes::Batch host_;                            // CPU device
  std::shared_ptr<detail::DeviceSlots> slots_;   // CUDA device: the pool ...
  detail::DeviceSlot* slot_ = nullptr;           // ... and the slot
  bool computed_ = false;  // work ordered after the copy has completed (set by the compute stage)
};

}  // namespace stoke::gpu
