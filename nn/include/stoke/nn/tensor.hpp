// Tensor: an n-dimensional array on a device, with an element type and, for images, a memory
// layout. Copies are shallow (they share the elements, like a PyTorch tensor); a tensor either
// owns its memory (shared by its copies, freed with the last) or is a view of memory someone
// else owns (a DeviceBatch's buffer, a user's array), valid while that memory is.
//
//   using namespace stoke::nn;
//   Tensor x({64, 3, 32, 32});                                 // f32, NCHW, on the CPU, uninitialised
//   Tensor w = Tensor::zeros({10, 128}, DType::f32, Device::cuda(0), stream);
//   Tensor flat = x.reshape({64, 3 * 32 * 32});                // the same elements
//   std::vector<float> values = w.to_vector(stream);           // copied to the host, as floats
//
// Shapes are logical and outermost first. A 4-d image tensor's shape is always {N, C, H, W},
// whatever its layout: `layout` says only how the elements lie in memory (NCHW: planes; NHWC:
// channels interleaved, "channels-last", which tensor cores want). Other ranks are row-major and
// their layout is NCHW by convention.
//
// Not thread-safe for concurrent writes to the same elements; distinct tensors are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "stoke/nn/device.hpp"

namespace stoke::nn {

/// Dimensions, outermost first.
using Shape = std::vector<std::int64_t>;

/// "[64, 3, 32, 32]".
std::string to_string(const Shape& shape);
/// The product of the dimensions (1 for a scalar's empty shape).
std::int64_t element_count(const Shape& shape) noexcept;

class Tensor {
 public:
  /// An empty tensor: no elements, no memory, numel() == 0, defined() == false.
  Tensor() = default;
  /// A tensor owning uninitialised memory for `shape` on `device` (host memory 64-byte aligned;
  /// cudaMalloc on a CUDA device). Throws std::invalid_argument for a negative dimension, and
  /// what DeviceBuffer throws when device memory cannot be had.
  explicit Tensor(Shape shape, DType dtype = DType::f32, Device device = Device::cpu(),
                  TensorLayout layout = TensorLayout::nchw);

  /// An owning tensor of zeros; on a CUDA device the fill is enqueued on `stream`.
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu(),
                      StreamView stream = StreamView::host(), TensorLayout layout = TensorLayout::nchw);
  /// A host f32 tensor holding `values` (copied); values.size() must be the shape's element count.
  static Tensor from_values(Shape shape, std::span<const float> values);
  static Tensor from_values(Shape shape, std::initializer_list<float> values);
  /// A view of `data`, which must hold element_count(shape) elements of `dtype` on `device` and
  /// outlive every copy of the view. Nothing is copied or freed.
  static Tensor view_of(void* data, Shape shape, DType dtype, Device device = Device::cpu(),
                        TensorLayout layout = TensorLayout::nchw);
  /// A tensor owning memory that `owner` keeps alive (its deleter frees it, or returns it to a
  /// pool: how CudaBackend::empty hands out cached device memory); `owner.get()` is the first
  /// element, and must hold element_count(shape) elements of `dtype` on `device`.
  static Tensor from_owner(std::shared_ptr<void> owner, Shape shape, DType dtype, Device device,
                           TensorLayout layout = TensorLayout::nchw);

  bool defined() const noexcept { return data_ != nullptr || !shape_.empty(); }
  const Shape& shape() const noexcept { return shape_; }
  std::size_t rank() const noexcept { return shape_.size(); }
  /// Dimension `i`; negative counts from the end (-1 is the last). Throws std::out_of_range.
  std::int64_t dim(int i) const;
  std::int64_t numel() const noexcept { return element_count(shape_); }
  std::size_t bytes() const noexcept { return static_cast<std::size_t>(numel()) * element_size(dtype_); }
  DType dtype() const noexcept { return dtype_; }
  TensorLayout layout() const noexcept { return layout_; }
  Device device() const noexcept { return device_; }
  /// True when this tensor (with its copies) owns its memory; false for a view and for empty().
  bool owning() const noexcept { return owner_ != nullptr; }

  /// The first element. A device pointer for a CUDA tensor: never dereference it on the host.
  void* data() const noexcept { return data_; }
  /// data() as T*. Throws std::logic_error when T does not match dtype() (std::uint16_t for bf16
  /// and f16).
  template <class T>
  T* data_as() const;
  /// The elements of a host f32 tensor. Throws std::logic_error naming the tensor otherwise.
  std::span<float> f32() const;

  /// The same elements with another shape of the same element count; a 4-d result keeps the
  /// layout, anything else is row-major (NCHW). Throws std::invalid_argument naming both shapes.
  Tensor reshape(Shape shape) const;
  /// reshape() to a 4-d shape tagged `layout`: for a channels-last result from rows (Flatten's
  /// gradient), allowed only where the two memory orders agree (C == 1 or H * W == 1).
  Tensor reshape(Shape shape, TensorLayout layout) const;

  /// A copy on `device` (possibly the same one), enqueued on `stream` (a CUDA stream of the
  /// device on the GPU side of the copy; the host stream for host-to-host).
  Tensor to(Device device, StreamView stream = StreamView::host()) const;
  /// A copy of the elements as host floats, in memory order; converts bf16/f16/u8. Synchronises
  /// `stream` when the tensor is on a CUDA device.
  std::vector<float> to_vector(StreamView stream = StreamView::host()) const;
  /// Copies `src`'s elements into this tensor's memory (same dtype and element count; either may
  /// be on the host or the device), enqueued on `stream`.
  void copy_from(const Tensor& src, StreamView stream = StreamView::host()) const;
  /// Sets every byte to zero, enqueued on `stream`.
  void zero(StreamView stream = StreamView::host()) const;

  /// "f32[64, 3, 32, 32] nchw cpu".
  std::string describe() const;

 private:
  Shape shape_;
  DType dtype_ = DType::f32;
  TensorLayout layout_ = TensorLayout::nchw;
  Device device_;
  std::shared_ptr<void> owner_;  // null for a view
  void* data_ = nullptr;
};

namespace detail {
[[noreturn]] void throw_dtype_mismatch(const Tensor& t, DType asked);
template <class T>
constexpr bool holds(DType dtype) noexcept {
  if constexpr (std::is_same_v<T, float>) return dtype == DType::f32;
  if constexpr (std::is_same_v<T, std::uint16_t>) return dtype == DType::bf16 || dtype == DType::f16;
  if constexpr (std::is_same_v<T, std::uint8_t>) return dtype == DType::u8;
  if constexpr (std::is_same_v<T, std::int32_t>) return dtype == DType::i32;
  return false;
}
template <class T>
constexpr DType dtype_of() noexcept {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, std::uint8_t>) return DType::u8;
  if constexpr (std::is_same_v<T, std::int32_t>) return DType::i32;
  return DType::bf16;
}
}  // namespace detail

template <class T>
T* Tensor::data_as() const {
  using Element = std::remove_const_t<T>;
  if (!detail::holds<Element>(dtype_)) detail::throw_dtype_mismatch(*this, detail::dtype_of<Element>());
  return static_cast<T*>(data_);
}

/// A host copy of `x` (f32 NCHW, 4-d) with its elements rearranged into `layout`; the shape stays
/// {N, C, H, W}. A tensor already in `layout` is copied as it is.
Tensor to_layout(const Tensor& x, TensorLayout layout);

}  // namespace stoke::nn
