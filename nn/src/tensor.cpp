#include "stoke/nn/tensor.hpp"

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "stoke/nn/device.hpp"

namespace stoke::nn {

namespace {

constexpr std::size_t host_alignment = 64;  // a cache line, and what AVX-512 loads like

void check_shape(const Shape& shape) {
  for (const std::int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("Tensor: shape " + to_string(shape) + " has a negative dimension");
  }
}

std::shared_ptr<void> allocate(std::size_t bytes, Device device) {
  if (device.is_cuda()) {
    auto buffer = std::make_shared<DeviceBuffer>(device, bytes);
    void* data = buffer->data();
    return {std::move(buffer), data};  // aliasing: owns the buffer, points at its memory
  }
  // aligned_alloc wants a multiple of the alignment, and something to free for zero bytes.
  const std::size_t rounded = (bytes + host_alignment - 1) / host_alignment * host_alignment;
  void* data = std::aligned_alloc(host_alignment, rounded == 0 ? host_alignment : rounded);
  if (data == nullptr) throw std::bad_alloc();
  return {data, [](void* p) { std::free(p); }};
}

}  // namespace

std::string to_string(const Shape& shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::int64_t element_count(const Shape& shape) noexcept {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

Tensor::Tensor(Shape shape, DType dtype, Device device, TensorLayout layout)
    : shape_(std::move(shape)), dtype_(dtype), layout_(layout), device_(device) {
  check_shape(shape_);
  owner_ = allocate(bytes(), device_);
  data_ = owner_.get();
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device, StreamView stream, TensorLayout layout) {
  Tensor t(std::move(shape), dtype, device, layout);
  t.zero(stream);
  return t;
}

Tensor Tensor::from_values(Shape shape, std::span<const float> values) {
  Tensor t(std::move(shape));
  if (static_cast<std::size_t>(t.numel()) != values.size()) {
    throw std::invalid_argument("Tensor::from_values: shape " + to_string(t.shape()) + " holds " +
                                std::to_string(t.numel()) + " elements, but " + std::to_string(values.size()) +
                                " values were given");
  }
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size_bytes());
  return t;
}

Tensor Tensor::from_values(Shape shape, std::initializer_list<float> values) {
  return from_values(std::move(shape), std::span<const float>(values.begin(), values.size()));
}

Tensor Tensor::view_of(void* data, Shape shape, DType dtype, Device device, TensorLayout layout) {
  check_shape(shape);
  Tensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.layout_ = layout;
  t.device_ = device;
  t.data_ = data;
  return t;
}

Tensor Tensor::from_owner(std::shared_ptr<void> owner, Shape shape, DType dtype, Device device, TensorLayout layout) {
  Tensor t = view_of(owner.get(), std::move(shape), dtype, device, layout);
  t.owner_ = std::move(owner);
  return t;
}

std::int64_t Tensor::dim(int i) const {
  const auto rank_ = static_cast<int>(shape_.size());
  const int index = i < 0 ? i + rank_ : i;
  if (index < 0 || index >= rank_) {
    throw std::out_of_range("Tensor::dim(" + std::to_string(i) + ") of " + describe());
  }
  return shape_[static_cast<std::size_t>(index)];
}

namespace detail {
void throw_dtype_mismatch(const Tensor& t, DType asked) {
  throw std::logic_error("Tensor: " + t.describe() + " read as " + std::string(to_string(asked)));
}
}  // namespace detail

std::span<float> Tensor::f32() const {
  if (dtype_ != DType::f32 || !device_.is_cpu()) {
    throw std::logic_error("Tensor::f32(): " + describe() + " is not an f32 tensor on the CPU");
  }
  return {static_cast<float*>(data_), static_cast<std::size_t>(numel())};
}

Tensor Tensor::reshape(Shape shape) const {
  check_shape(shape);
  if (element_count(shape) != numel()) {
    throw std::invalid_argument("Tensor::reshape: " + describe() + " cannot become " + to_string(shape) + " (" +
                                std::to_string(element_count(shape)) + " elements)");
  }
  if (layout_ == TensorLayout::nhwc && shape.size() != 4 && numel() > 0 && shape_.size() == 4 && shape_[1] > 1 &&
      shape_[2] * shape_[3] > 1) {
    throw std::invalid_argument("Tensor::reshape: " + describe() +
                                " is channels-last; its memory order is not the shape's row-major order, so it "
                                "cannot be viewed as " +
                                to_string(shape) + " (convert it to NCHW first)");
  }
  Tensor t = *this;
  t.layout_ = shape.size() == 4 ? layout_ : TensorLayout::nchw;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshape(Shape shape, TensorLayout layout) const {
  Tensor t = reshape(shape);
  if (t.rank() != 4 || t.layout_ == layout) return t;
  if (t.shape_[1] != 1 && t.shape_[2] * t.shape_[3] != 1) {
    throw std::invalid_argument("Tensor::reshape: " + describe() + " cannot become " + to_string(t.shape_) + " " +
                                std::string(to_string(layout)) +
                                ": the two memory orders differ (they agree only when C == 1 or H * W == 1)");
  }
  t.layout_ = layout;
  return t;
}

Tensor Tensor::to(Device device, StreamView stream) const {
  Tensor t(shape_, dtype_, device, layout_);
  t.copy_from(*this, stream);
  return t;
}

void Tensor::copy_from(const Tensor& src, StreamView stream) const {
  if (src.dtype_ != dtype_ || src.numel() != numel()) {
    throw std::invalid_argument("Tensor::copy_from: " + src.describe() + " into " + describe() +
                                ": the dtypes and element counts must match");
  }
  if (bytes() == 0) return;
  if (device_.is_cpu() && src.device_.is_cpu()) {
    std::memcpy(data_, src.data_, bytes());
    return;
  }
  copy_async(data_, src.data_, bytes(), stream);
}

void Tensor::zero(StreamView stream) const {
  if (bytes() == 0) return;
  if (device_.is_cpu()) {
    std::memset(data_, 0, bytes());
    return;
  }
  fill_async(data_, 0, bytes(), stream);
}

std::vector<float> Tensor::to_vector(StreamView stream) const {
  const Tensor host = device_.is_cpu() ? *this : to(Device::cpu(), stream);
  if (!device_.is_cpu()) stream.synchronize();
  std::vector<float> values(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype_) {
      case DType::f32:
        values[i] = static_cast<const float*>(host.data_)[i];
        break;
      case DType::bf16:
        values[i] = float_from_bf16(static_cast<const std::uint16_t*>(host.data_)[i]);
        break;
      case DType::f16:
        values[i] = float_from_f16(static_cast<const std::uint16_t*>(host.data_)[i]);
        break;
      case DType::u8:
        values[i] = static_cast<const std::uint8_t*>(host.data_)[i];
        break;
      case DType::i32:
        values[i] = static_cast<float>(static_cast<const std::int32_t*>(host.data_)[i]);
        break;
      case DType::u16:
        values[i] = static_cast<const std::uint16_t*>(host.data_)[i];
        break;
      case DType::i16:
        values[i] = static_cast<const std::int16_t*>(host.data_)[i];
        break;
    }
  }
  return values;
}

std::string Tensor::describe() const {
  return std::string(gpu::to_string(dtype_)) + to_string(shape_) + " " + std::string(gpu::to_string(layout_)) + " " +
         device_.str();
}

Tensor to_layout(const Tensor& x, TensorLayout layout) {
  if (x.rank() != 4 || x.dtype() != DType::f32 || !x.device().is_cpu()) {
    throw std::invalid_argument("to_layout: " + x.describe() + " is not a 4-d f32 tensor on the CPU");
  }
  Tensor out(x.shape(), DType::f32, Device::cpu(), layout);
  if (x.layout() == layout) {
    out.copy_from(x);
    return out;
  }
  const std::int64_t n = x.dim(0), c = x.dim(1), hw = x.dim(2) * x.dim(3);
  const float* src = x.data_as<float>();
  float* dst = out.data_as<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t p = 0; p < hw; ++p) {
        const std::int64_t planar = (i * c + ch) * hw + p;
        const std::int64_t interleaved = (i * hw + p) * c + ch;
        if (layout == TensorLayout::nhwc) {
          dst[interleaved] = src[planar];
        } else {
          dst[planar] = src[interleaved];
        }
      }
    }
  }
  return out;
}

}  // namespace stoke::nn
