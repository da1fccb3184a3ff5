// Simulated cuBLAS and cuDNN, just enough for stoke's handle wrappers (handles.cpp) and error
// checks (error_cuda.cpp), and for the calls cuda_runtime_test makes through them: a handle owns
// the stream it is bound to; SAXPY and cudnnSetTensor run on that stream through the simulated
// runtime (fake_cudart.hpp), reading and writing device memory like the real libraries.
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdio>
#include <string>

#include "fake_cudart.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

struct cudnnTensorStruct {
  std::size_t elements = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  bool set = false;
};

namespace {

bool have_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace

extern "C" {

// ---- cuBLAS ------------------------------------------------------------------------------------

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (!have_device()) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

// y = alpha x + y, with alpha on the host (cuBLAS's default pointer mode).
cublasStatus_t cublasSaxpy_v2(cublasHandle_t handle, int n, const float* alpha, const float* x, int incx, float* y,
                              int incy) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (n <= 0) return CUBLAS_STATUS_SUCCESS;
  if (alpha == nullptr || incx <= 0 || incy <= 0) return CUBLAS_STATUS_INVALID_VALUE;
  const auto span = [n](int inc) {
    return (static_cast<std::size_t>(n - 1) * static_cast<std::size_t>(inc) + 1) * sizeof(float);
  };
  if (stoke::gpu::sim::check_kernel_access(x, span(incx), "cublasSaxpy (x)") != cudaSuccess ||
      stoke::gpu::sim::check_kernel_access(y, span(incy), "cublasSaxpy (y)") != cudaSuccess) {
    (void)cudaGetLastError();
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  const float a = *alpha;
  const cudaError_t error = stoke::gpu::sim::enqueue(handle->stream, [=] {
    for (int i = 0; i < n; ++i) y[i * incy] += a * x[i * incx];
  });
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
#define STOKE_SIM_NAME(code) \
  case code:                 \
    return #code;
    STOKE_SIM_NAME(CUBLAS_STATUS_SUCCESS)
    STOKE_SIM_NAME(CUBLAS_STATUS_NOT_INITIALIZED)
    STOKE_SIM_NAME(CUBLAS_STATUS_ALLOC_FAILED)
    STOKE_SIM_NAME(CUBLAS_STATUS_INVALID_VALUE)
    STOKE_SIM_NAME(CUBLAS_STATUS_ARCH_MISMATCH)
    STOKE_SIM_NAME(CUBLAS_STATUS_MAPPING_ERROR)
    STOKE_SIM_NAME(CUBLAS_STATUS_EXECUTION_FAILED)
    STOKE_SIM_NAME(CUBLAS_STATUS_INTERNAL_ERROR)
    STOKE_SIM_NAME(CUBLAS_STATUS_NOT_SUPPORTED)
    STOKE_SIM_NAME(CUBLAS_STATUS_LICENSE_ERROR)
#undef STOKE_SIM_NAME
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    default:
      return "an unsupported value or parameter was passed to the function";
  }
}

// ---- cuDNN -------------------------------------------------------------------------------------

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (!have_device()) return CUDNN_STATUS_NOT_INITIALIZED;
  *handle = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  delete handle;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  handle->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr || stream == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *stream = handle->stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* descriptor) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *descriptor = new cudnnTensorStruct;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t descriptor) {
  delete descriptor;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t descriptor, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (descriptor == nullptr || n <= 0 || c <= 0 || h <= 0 || w <= 0) return CUDNN_STATUS_BAD_PARAM;
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) return CUDNN_STATUS_NOT_SUPPORTED;
  descriptor->elements = static_cast<std::size_t>(n) * static_cast<std::size_t>(c) * static_cast<std::size_t>(h) *
                         static_cast<std::size_t>(w);
  descriptor->type = type;
  descriptor->set = true;
  return CUDNN_STATUS_SUCCESS;
}

// Every element of a packed float tensor set to *value, on the handle's stream.
cudnnStatus_t cudnnSetTensor(cudnnHandle_t handle, const cudnnTensorDescriptor_t descriptor, void* data,
                             const void* value) {
  if (handle == nullptr || descriptor == nullptr || !descriptor->set || data == nullptr || value == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  if (descriptor->type != CUDNN_DATA_FLOAT) return CUDNN_STATUS_NOT_SUPPORTED;
  const std::size_t elements = descriptor->elements;
  if (stoke::gpu::sim::check_kernel_access(data, elements * sizeof(float), "cudnnSetTensor") != cudaSuccess) {
    (void)cudaGetLastError();
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  const float fill = *static_cast<const float*>(value);
  auto* out = static_cast<float*>(data);
  if (stoke::gpu::sim::enqueue(handle->stream, [=] {
        for (std::size_t i = 0; i < elements; ++i) out[i] = fill;
      }) != cudaSuccess) {
    (void)cudaGetLastError();
    return CUDNN_STATUS_EXECUTION_FAILED;
  }
  return CUDNN_STATUS_SUCCESS;
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
#define STOKE_SIM_NAME(code) \
  case code:                 \
    return #code;
    STOKE_SIM_NAME(CUDNN_STATUS_SUCCESS)
    STOKE_SIM_NAME(CUDNN_STATUS_NOT_INITIALIZED)
    STOKE_SIM_NAME(CUDNN_STATUS_BAD_PARAM)
    STOKE_SIM_NAME(CUDNN_STATUS_NOT_SUPPORTED)
    STOKE_SIM_NAME(CUDNN_STATUS_INTERNAL_ERROR)
    STOKE_SIM_NAME(CUDNN_STATUS_EXECUTION_FAILED)
#undef STOKE_SIM_NAME
    default:
      return "CUDNN_STATUS_UNKNOWN";
  }
}

void cudnnGetLastErrorString(char* message, std::size_t size) {
  if (message != nullptr && size > 0) message[0] = '\0';  // nothing more precise than the status
}

}  // extern "C"
