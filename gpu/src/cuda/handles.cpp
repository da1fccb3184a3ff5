#include "stoke/gpu/handles.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <utility>

#include "cuda_internal.hpp"

namespace stoke::gpu {
namespace {

void check_same_device(StreamView current, StreamView next, const char* what) {
  if (next.device() != current.device())
    throw DeviceError(std::string(what) + ": the handle belongs to " + current.device().str() + " but the stream to " +
                      next.device().str() + "; create a handle for each device");
}

}  // namespace

// ---- CublasHandle ----------------------------------------------------------------------------

CublasHandle::CublasHandle(StreamView stream) {
  const cudaStream_t native = detail::native_stream(stream, "a CublasHandle");
  const DeviceGuard guard(stream.device());  // a cuBLAS handle belongs to the current device
  cublasHandle_t handle = nullptr;
  STOKE_CUBLAS_CHECK(cublasCreate(&handle));
  handle_ = handle;
  stream_ = stream;
  try {
    STOKE_CUBLAS_CHECK(cublasSetStream(handle_, native));
  } catch (...) {
    reset();
    throw;
  }
}

CublasHandle::~CublasHandle() { reset(); }

CublasHandle::CublasHandle(CublasHandle&& other) noexcept
    : stream_(std::exchange(other.stream_, StreamView::host())), handle_(std::exchange(other.handle_, nullptr)) {}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = std::exchange(other.stream_, StreamView::host());
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void CublasHandle::set_stream(StreamView stream) {
  if (handle_ == nullptr) throw DeviceError("CublasHandle::set_stream on an empty handle (moved from?)");
  const cudaStream_t native = detail::native_stream(stream, "CublasHandle::set_stream");
  check_same_device(stream_, stream, "CublasHandle::set_stream");
  STOKE_CUBLAS_CHECK(cublasSetStream(handle_, native));
  stream_ = stream;
}

void CublasHandle::reset() noexcept {
  if (handle_ != nullptr) {
    const detail::CleanupDeviceScope scope(stream_.device());
    STOKE_CUBLAS_REPORT(cublasDestroy(handle_));
  }
  handle_ = nullptr;
}

// ---- CudnnHandle -----------------------------------------------------------------------------

CudnnHandle::CudnnHandle(StreamView stream) {
  const cudaStream_t native = detail::native_stream(stream, "a CudnnHandle");
  const DeviceGuard guard(stream.device());  // a cuDNN handle belongs to the current device
  cudnnHandle_t handle = nullptr;
  STOKE_CUDNN_CHECK(cudnnCreate(&handle));
  handle_ = handle;
  stream_ = stream;
  try {
    STOKE_CUDNN_CHECK(cudnnSetStream(handle_, native));
  } catch (...) {
    reset();
    throw;
  }
}

CudnnHandle::~CudnnHandle() { reset(); }

CudnnHandle::CudnnHandle(CudnnHandle&& other) noexcept
    : stream_(std::exchange(other.stream_, StreamView::host())), handle_(std::exchange(other.handle_, nullptr)) {}

CudnnHandle& CudnnHandle::operator=(CudnnHandle&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = std::exchange(other.stream_, StreamView::host());
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void CudnnHandle::set_stream(StreamView stream) {
  if (handle_ == nullptr) throw DeviceError("CudnnHandle::set_stream on an empty handle (moved from?)");
  const cudaStream_t native = detail::native_stream(stream, "CudnnHandle::set_stream");
  check_same_device(stream_, stream, "CudnnHandle::set_stream");
  STOKE_CUDNN_CHECK(cudnnSetStream(handle_, native));
  stream_ = stream;
}

void CudnnHandle::reset() noexcept {
  if (handle_ != nullptr) {
    const detail::CleanupDeviceScope scope(stream_.device());
    STOKE_CUDNN_REPORT(cudnnDestroy(handle_));
  }
  handle_ = nullptr;
}

}  // namespace stoke::gpu
