// cuBLAS and cuDNN handles, owned, each bound to a stream: one template, LibraryHandle, with a
// small description of each library (CublasLibrary, CudnnLibrary) for its handle's type and name.
//
//   CublasHandle blas(stream);                        // cublasCreate + cublasSetStream
//   cublasSgemm(blas.native(), ...);                  // runs on `stream`
//   blas.set_stream(other);                           // another stream of the same device
//
// This header never includes CUDA's: the handles are the libraries' opaque pointers, declared
// below. The members are defined in src/cuda/handles.cpp (a build with CUDA) and in
// src/without_cuda.cpp (a build without, where constructing a handle throws DeviceError).
#pragma once

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/stream.hpp"

// The libraries' opaque handle types (cublasHandle_t, cudnnHandle_t).
struct cublasContext;
struct cudnnContext;

namespace stoke::gpu {

/// cuBLAS, as LibraryHandle sees it.
struct CublasLibrary {
  using Native = cublasContext*;  ///< cublasHandle_t
  static constexpr const char* handle_name = "CublasHandle";
};

/// cuDNN, as LibraryHandle sees it.
struct CudnnLibrary {
  using Native = cudnnContext*;  ///< cudnnHandle_t
  static constexpr const char* handle_name = "CudnnHandle";
};

/// A handle of `Library` (CublasLibrary or CudnnLibrary) whose calls run on one stream: created
/// on the stream's device, destroyed by the destructor (which waits for the device as the
/// library's destroy call does, and never throws). Move-only; used by one thread at a time.
template <class Library>
class LibraryHandle {
 public:
  using Native = typename Library::Native;

  /// Throws DeviceError for the host stream or a build without CUDA; CublasError or CudnnError
  /// when the library fails to create the handle or bind the stream.
  explicit LibraryHandle(StreamView stream);
  ~LibraryHandle();
  LibraryHandle(LibraryHandle&& other) noexcept;
  LibraryHandle& operator=(LibraryHandle&& other) noexcept;
  LibraryHandle(const LibraryHandle&) = delete;
  LibraryHandle& operator=(const LibraryHandle&) = delete;

  /// Moves later calls to another stream of the same device. Throws DeviceError for the host
  /// stream, a stream of another device or a moved-from handle.
  void set_stream(StreamView stream);
  StreamView stream() const noexcept { return stream_; }
  /// The library's handle (null after a move).
  Native native() const noexcept { return handle_; }

 private:
  void reset() noexcept;
  StreamView stream_;
  Native handle_ = nullptr;
};

// Instantiated once, in the library (src/cuda/handles.cpp or src/without_cuda.cpp).
extern template class LibraryHandle<CublasLibrary>;
extern template class LibraryHandle<CudnnLibrary>;

/// A cuBLAS handle whose calls run on a stream.
using CublasHandle = LibraryHandle<CublasLibrary>;
/// A cuDNN handle whose calls run on a stream.
using CudnnHandle = LibraryHandle<CudnnLibrary>;

}  // namespace stoke::gpu
