// Owners of cuDNN's descriptors (tensor, filter, convolution, batch norm parameters), for
// CudaBackend's convolutions and batch normalisation.
// Each creates its descriptor, sets it from a Tensor or a geometry, and destroys it; move-only;
// the destructors never throw. Pooling and activation descriptors are not needed: those kernels
// are CudaBackend's own (pooling_kernels.cu), which match the CPU's tie-breaking exactly.
#pragma once

#include <cudnn.h>

#include <stdexcept>
#include <string>
#include <utility>

#include "stoke/nn/backend.hpp"
#include "stoke/nn/device.hpp"
#include "stoke/nn/tensor.hpp"

namespace stoke::nn::cuda {

/// cuDNN's data type for a tensor's dtype (f32, bf16, f16).
inline cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    case DType::f16:
      return CUDNN_DATA_HALF;
    default:
      throw std::invalid_argument("CudaBackend: cuDNN kernels take f32, bf16 or f16 tensors, not " +
                                  std::string(to_string(dtype)));
  }
}

inline cudnnTensorFormat_t cudnn_format(TensorLayout layout) {
  return layout == TensorLayout::nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
}

// The create/destroy pair of one descriptor type, as a move-only owner.
template <class Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class CudnnDescriptor {
 public:
  CudnnDescriptor() { STOKE_CUDNN_CHECK(Create(&handle_)); }
  ~CudnnDescriptor() {
    if (handle_ != nullptr) STOKE_CUDNN_REPORT(Destroy(handle_));
  }
  CudnnDescriptor(CudnnDescriptor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  CudnnDescriptor& operator=(CudnnDescriptor&& other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;

  Handle get() const noexcept { return handle_; }

 private:
  Handle handle_ = nullptr;
};

/// A 4-d tensor: {N, C, H, W} in the tensor's layout.
class TensorDescriptor {
 public:
  explicit TensorDescriptor(const Tensor& t) {
    STOKE_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_.get(), cudnn_format(t.layout()), cudnn_type(t.dtype()),
                                                 static_cast<int>(t.dim(0)), static_cast<int>(t.dim(1)),
                                                 static_cast<int>(t.dim(2)), static_cast<int>(t.dim(3))));
  }
  cudnnTensorDescriptor_t get() const noexcept { return desc_.get(); }

 private:
  CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> desc_;
};

/// Batch normalisation's per-channel tensors (scale, bias, means, variances) for inputs `x` in
/// `mode`: cuDNN derives them ({1, C, 1, 1}, f32 for every input dtype).
class BatchNormParamDescriptor {
 public:
  BatchNormParamDescriptor(const TensorDescriptor& x, cudnnBatchNormMode_t mode) {
    STOKE_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(desc_.get(), x.get(), mode));
  }
  cudnnTensorDescriptor_t get() const noexcept { return desc_.get(); }

 private:
  CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor> desc_;
};

/// A convolution's weights {Cout, Cin / groups, k, k} in the tensor's layout.
class FilterDescriptor {
 public:
  explicit FilterDescriptor(const Tensor& w) {
    STOKE_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc_.get(), cudnn_type(w.dtype()), cudnn_format(w.layout()),
                                                 static_cast<int>(w.dim(0)), static_cast<int>(w.dim(1)),
                                                 static_cast<int>(w.dim(2)), static_cast<int>(w.dim(3))));
  }
  cudnnFilterDescriptor_t get() const noexcept { return desc_.get(); }

 private:
  CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor> desc_;
};

/// A cross-correlation (what PyTorch calls convolution) with f32 accumulation; tensor-core math
/// for bf16 and f16, plain FMA for f32 (no TF32, so f32 results stay close to the CPU's).
class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor(const Conv2dGeometry& g, DType dtype) {
    STOKE_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc_.get(), g.padding, g.padding, g.stride, g.stride, g.dilation,
                                                      g.dilation, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    STOKE_CUDNN_CHECK(cudnnSetConvolutionGroupCount(desc_.get(), g.groups));
    set_math(dtype == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH);
  }
  /// The math an algorithm was found with (cudnnFind* reports it per algorithm).
  void set_math(cudnnMathType_t math) { STOKE_CUDNN_CHECK(cudnnSetConvolutionMathType(desc_.get(), math)); }
  cudnnConvolutionDescriptor_t get() const noexcept { return desc_.get(); }

 private:
  CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>
      desc_;
};

}  // namespace stoke::nn::cuda
