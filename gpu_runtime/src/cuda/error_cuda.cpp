// The CUDA build's half of error.hpp: the libraries' names and texts for their error codes.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <string>

#include "../internal.hpp"
#include "stoke/gpu/error.hpp"

namespace stoke::gpu::detail {
namespace {

// cuDNN 9 keeps a per-thread description of the last failure, more precise than the status.
std::string cudnn_detail(cudnnStatus_t status) {
  std::array<char, 512> message{};
  cudnnGetLastErrorString(message.data(), message.size());
  if (message[0] != '\0') return message.data();
  return "cuDNN status " + std::to_string(static_cast<int>(status));
}

}  // namespace

void throw_cuda_error(int code, const char* call, const char* file, int line) {
  const auto error = static_cast<cudaError_t>(code);
  // A failed call also leaves its (non-sticky) error as the thread's last error; clear it so that a
  // later cudaGetLastError() check does not report this failure a second time.
  (void)cudaGetLastError();
  if (error == cudaErrorMemoryAllocation)
    throw CudaOutOfMemory("CUDA", code, cudaGetErrorName(error), cudaGetErrorString(error), call, file, line);
  throw CudaError("CUDA", code, cudaGetErrorName(error), cudaGetErrorString(error), call, file, line);
}

void throw_cublas_error(int code, const char* call, const char* file, int line) {
  const auto status = static_cast<cublasStatus_t>(code);
  throw CublasError("cuBLAS", code, cublasGetStatusName(status), cublasGetStatusString(status), call, file, line);
}

void throw_cudnn_error(int code, const char* call, const char* file, int line) {
  const auto status = static_cast<cudnnStatus_t>(code);
  throw CudnnError("cuDNN", code, cudnnGetErrorString(status), cudnn_detail(status), call, file, line);
}

void report_cuda_error(int code, const char* call, const char* file, int line) noexcept {
  const auto error = static_cast<cudaError_t>(code);
  (void)cudaGetLastError();
  // At exit, static objects may outlive the runtime: their resources are going away with it.
  if (error == cudaErrorCudartUnloading) return;
  report_failure(cudaGetErrorName(error), cudaGetErrorString(error), call, file, line);
}

void report_cublas_error(int code, const char* call, const char* file, int line) noexcept {
  const auto status = static_cast<cublasStatus_t>(code);
  report_failure(cublasGetStatusName(status), cublasGetStatusString(status), call, file, line);
}

void report_cudnn_error(int code, const char* call, const char* file, int line) noexcept {
  const auto status = static_cast<cudnnStatus_t>(code);
  report_failure(cudnnGetErrorString(status), "", call, file, line);
}

}  // namespace stoke::gpu::detail
