// cuBLAS and cuDNN handles, owned, each bound to a stream.
#pragma once

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/stream.hpp"

// The libraries' opaque handle types (cublasHandle_t, cudnnHandle_t).
struct cublasContext;
struct cudnnContext;

namespace stoke::gpu {

/// A cuBLAS handle whose calls run on `stream`. Move-only; the destructor never throws.
class CublasHandle {
 public:
  /// Throws DeviceError for the host stream or a build without CUDA, CublasError when cuBLAS fails.
  explicit CublasHandle(StreamView stream);
  ~CublasHandle();
  CublasHandle(CublasHandle&& other) noexcept;
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;

  /// Moves later calls to another stream of the same device.
  void set_stream(StreamView stream);
  StreamView stream() const noexcept { return stream_; }
  cublasContext* native() const noexcept { return handle_; }

 private:
  void reset() noexcept;
  StreamView stream_;
  cublasContext* handle_ = nullptr;
};

/// A cuDNN handle whose calls run on `stream`. Move-only; the destructor never throws.
class CudnnHandle {
 public:
  /// Throws DeviceError for the host stream or a build without CUDA, CudnnError when cuDNN fails.
  explicit CudnnHandle(StreamView stream);
  ~CudnnHandle();
  CudnnHandle(CudnnHandle&& other) noexcept;
  CudnnHandle& operator=(CudnnHandle&& other) noexcept;
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;

  void set_stream(StreamView stream);
  StreamView stream() const noexcept { return stream_; }
  cudnnContext* native() const noexcept { return handle_; }

 private:
  void reset() noexcept;
  StreamView stream_;
  cudnnContext* handle_ = nullptr;
};

}  // namespace stoke::gpu
