#include "stoke/gpu/handles.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>
#include <utility>

#include "cuda_internal.hpp"

namespace stoke::gpu {
namespace {

// What differs between the libraries: three calls each, overloaded on the handle's type.
void create(cublasHandle_t* handle) { STOKE_CUBLAS_CHECK(cublasCreate(handle)); }
void bind(cublasHandle_t handle, cudaStream_t stream) { STOKE_CUBLAS_CHECK(cublasSetStream(handle, stream)); }
void destroy(cublasHandle_t handle) noexcept { STOKE_CUBLAS_REPORT(cublasDestroy(handle)); }

void create(cudnnHandle_t* handle) { STOKE_CUDNN_CHECK(cudnnCreate(handle)); }
void bind(cudnnHandle_t handle, cudaStream_t stream) { STOKE_CUDNN_CHECK(cudnnSetStream(handle, stream)); }
void destroy(cudnnHandle_t handle) noexcept { STOKE_CUDNN_REPORT(cudnnDestroy(handle)); }

void check_same_device(StreamView current, StreamView next, const std::string& what) {
  if (next.device() != current.device())
    throw DeviceError(what + ": the handle belongs to " + current.device().str() + " but the stream to " +
                      next.device().str() + "; create a handle for each device");
}

}  // namespace

template <class Library>
LibraryHandle<Library>::LibraryHandle(StreamView stream) {
  const cudaStream_t native = detail::native_stream(stream, (std::string("a ") + Library::handle_name).c_str());
  const DeviceGuard guard(stream.device());  // a handle belongs to the current device
  Native handle = nullptr;
  create(&handle);
  handle_ = handle;
  stream_ = stream;
  try {
    bind(handle_, native);
  } catch (...) {
    reset();
    throw;
  }
}

template <class Library>
LibraryHandle<Library>::~LibraryHandle() {
  reset();
}

template <class Library>
LibraryHandle<Library>::LibraryHandle(LibraryHandle&& other) noexcept
    : stream_(std::exchange(other.stream_, StreamView::host())), handle_(std::exchange(other.handle_, nullptr)) {}

template <class Library>
LibraryHandle<Library>& LibraryHandle<Library>::operator=(LibraryHandle&& other) noexcept {
  if (this != &other) {
    reset();
    stream_ = std::exchange(other.stream_, StreamView::host());
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

template <class Library>
void LibraryHandle<Library>::set_stream(StreamView stream) {
  const std::string what = std::string(Library::handle_name) + "::set_stream";
  if (handle_ == nullptr) throw DeviceError(what + " on an empty handle (moved from?)");
  const cudaStream_t native = detail::native_stream(stream, what.c_str());
  check_same_device(stream_, stream, what);
  bind(handle_, native);
  stream_ = stream;
}

template <class Library>
void LibraryHandle<Library>::reset() noexcept {
  if (handle_ != nullptr) {
    const detail::CleanupDeviceScope scope(stream_.device());
    destroy(handle_);
  }
  handle_ = nullptr;
}

template class LibraryHandle<CublasLibrary>;
template class LibraryHandle<CudnnLibrary>;

}  // namespace stoke::gpu
