// Private helpers of CudaBackend's source files: argument checks that name the kernel and the
// argument, the conversion of a Tensor to kernels.hpp's ImageDims, and the native stream.
#pragma once

#include <stdexcept>
#include <string>

#include "kernels.hpp"
#include "stoke/nn/tensor.hpp"

namespace stoke::nn::cuda {

/// The CUDA stream behind `stream`, as kernels.hpp's launchers take it.
inline Stream native(StreamView stream) noexcept { return stream.native(); }

/// Throws std::invalid_argument unless `t` is defined and on `device`.
inline void require_on(const Tensor& t, Device device, const char* kernel, const char* what) {
  if (!t.defined() || t.device() != device) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": " + what + " is " +
                                (t.defined() ? t.describe() : std::string("undefined")) + "; expected a tensor on " +
                                device.str());
  }
}

inline bool is_float_type(DType dtype) { return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16; }

/// require_on, and the dtype is f32, bf16 or f16 (and `like`'s, when `like` is given).
inline void require_float(const Tensor& t, Device device, const char* kernel, const char* what,
                          const Tensor* like = nullptr) {
  require_on(t, device, kernel, what);
  if (!is_float_type(t.dtype()) || (like != nullptr && t.dtype() != like->dtype())) {
    throw std::invalid_argument(
        std::string("CudaBackend::") + kernel + ": " + what + " is " + t.describe() +
        (like != nullptr ? "; expected " + std::string(to_string(like->dtype())) + " like " + like->describe()
                         : std::string("; expected f32, bf16 or f16")));
  }
}

/// require_on, and f32 (batch norm's parameters and statistics, the optimizer's tensors).
inline void require_f32(const Tensor& t, Device device, const char* kernel, const char* what) {
  require_on(t, device, kernel, what);
  if (t.dtype() != DType::f32) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": " + what + " is " + t.describe() +
                                "; expected f32");
  }
}

inline void require_count(const Tensor& t, std::int64_t count, const char* kernel, const char* what) {
  if (t.numel() != count) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": " + what + " is " + t.describe() +
                                "; expected " + std::to_string(count) + " elements");
  }
}

inline void require_shape(const Tensor& t, const Shape& shape, const char* kernel, const char* what) {
  if (t.shape() != shape) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": " + what + " is " + t.describe() +
                                "; expected " + to_string(shape));
  }
}

/// Two image tensors of one call must share their layout: the kernels index both the same way.
inline void require_layout(const Tensor& t, const Tensor& like, const char* kernel, const char* what) {
  if (t.rank() == 4 && like.rank() == 4 && t.layout() != like.layout()) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": " + what + " is " + t.describe() +
                                " but the input is " + std::string(to_string(like.layout())) +
                                "; the tensors of one call share a layout");
  }
}

/// A 4-d image's dims; a 4-d tensor is required.
inline ImageDims image_dims(const Tensor& t, const char* kernel, const char* what) {
  if (t.rank() != 4) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": " + what + " is " + t.describe() +
                                "; expected {N, C, H, W}");
  }
  return {t.dim(0), t.dim(1), t.dim(2), t.dim(3), t.layout() == TensorLayout::nhwc};
}

}  // namespace stoke::nn::cuda
