// Errors of the GPU layer, and the checks that turn a failed CUDA / cuBLAS / cuDNN call into one.
//
//   STOKE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream.native()));
//
// throws CudaError("gpu_runtime/src/cuda/memory.cpp:42: cudaMemcpyAsync(...) failed: cudaErrorInvalidValue
// (invalid argument)"), or CudaOutOfMemory when the device ran out of memory. The macros are for
// code that includes CUDA's own headers; this header does not, so it is safe everywhere.
#pragma once

#include <stdexcept>
#include <string>

namespace stoke::gpu {

/// The base of every error the GPU layer throws.
class GpuError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A device that cannot be used: a bad --device spec, a CUDA device that does not exist, CUDA
/// asked for in a build without it.
class DeviceError : public GpuError {
 public:
  using GpuError::GpuError;
};

/// A failed call into a GPU library, with where it was made and what the library said.
class GpuCallError : public GpuError {
 public:
  /// The message is "<file>:<line>: <call> failed: <code_name> (<text>)", the file shortened to
  /// its path in stoke's source tree when it is there; `context`, when given, leads it, e.g.
  /// "cuda:0: out of memory allocating 1.5 GiB (free 0.8 GiB of 139.8 GiB); <file>:<line>: ...".
  GpuCallError(std::string library, int code, std::string code_name, std::string text, std::string call,
               std::string file, int line, std::string context = {});

  const std::string& library() const noexcept { return library_; }  ///< "CUDA", "cuBLAS", "cuDNN"
  int code() const noexcept { return code_; }
  const std::string& code_name() const noexcept { return code_name_; }  ///< e.g. "cudaErrorInvalidValue"
  const std::string& text() const noexcept { return text_; }            ///< the library's description
  const std::string& call() const noexcept { return call_; }            ///< the call's source text
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  std::string library_;
  int code_;
  std::string code_name_;
  std::string text_;
  std::string call_;
  std::string file_;
  int line_;
};

/// A CUDA runtime call failed.
class CudaError : public GpuCallError {
 public:
  using GpuCallError::GpuCallError;
};

/// The device ran out of memory (cudaErrorMemoryAllocation). Its message says how much was asked
/// for where that is known; catching it and retrying with a smaller batch is legitimate.
class CudaOutOfMemory : public CudaError {
 public:
  using CudaError::CudaError;
};

class CublasError : public GpuCallError {
 public:
  using GpuCallError::GpuCallError;
};

class CudnnError : public GpuCallError {
 public:
  using GpuCallError::GpuCallError;
};

namespace detail {
// Look up the code's name and text (error_cuda.cpp) and throw. A build without CUDA defines them
// too (without_cuda.cpp), so code using the macros links in both builds.
[[noreturn]] void throw_cuda_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int code, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn_error(int code, const char* call, const char* file, int line);
/// For destructors, which must not throw: print one line to stderr and go on. A CUDA runtime
/// that is already unloading (static destructors at exit) is not reported.
void report_cuda_error(int code, const char* call, const char* file, int line) noexcept;
void report_cublas_error(int code, const char* call, const char* file, int line) noexcept;
void report_cudnn_error(int code, const char* call, const char* file, int line) noexcept;
}  // namespace detail

}  // namespace stoke::gpu

/// Throws CudaError (CudaOutOfMemory for cudaErrorMemoryAllocation) when `call` does not return
/// cudaSuccess.
#define STOKE_CUDA_CHECK(call)                                                                                 \
  do {                                                                                                         \
    const auto stoke_cuda_status_ = (call);                                                                    \
    if (stoke_cuda_status_ != 0)                                                                               \
      ::stoke::gpu::detail::throw_cuda_error(static_cast<int>(stoke_cuda_status_), #call, __FILE__, __LINE__); \
  } while (false)

/// Like STOKE_CUDA_CHECK but never throws (for destructors): reports the failure on stderr.
#define STOKE_CUDA_REPORT(call)                                                                                 \
  do {                                                                                                          \
    const auto stoke_cuda_status_ = (call);                                                                     \
    if (stoke_cuda_status_ != 0)                                                                                \
      ::stoke::gpu::detail::report_cuda_error(static_cast<int>(stoke_cuda_status_), #call, __FILE__, __LINE__); \
  } while (false)

/// Throws CublasError when `call` does not return CUBLAS_STATUS_SUCCESS.
#define STOKE_CUBLAS_CHECK(call)                                                                                   \
  do {                                                                                                             \
    const auto stoke_cublas_status_ = (call);                                                                      \
    if (stoke_cublas_status_ != 0)                                                                                 \
      ::stoke::gpu::detail::throw_cublas_error(static_cast<int>(stoke_cublas_status_), #call, __FILE__, __LINE__); \
  } while (false)

/// Throws CudnnError when `call` does not return CUDNN_STATUS_SUCCESS.
#define STOKE_CUDNN_CHECK(call)                                                                                  \
  do {                                                                                                           \
    const auto stoke_cudnn_status_ = (call);                                                                     \
    if (stoke_cudnn_status_ != 0)                                                                                \
      ::stoke::gpu::detail::throw_cudnn_error(static_cast<int>(stoke_cudnn_status_), #call, __FILE__, __LINE__); \
  } while (false)

/// Like STOKE_CUBLAS_CHECK but never throws (for destructors): reports the failure on stderr.
#define STOKE_CUBLAS_REPORT(call)                                                                                   \
  do {                                                                                                              \
    const auto stoke_cublas_status_ = (call);                                                                       \
    if (stoke_cublas_status_ != 0)                                                                                  \
      ::stoke::gpu::detail::report_cublas_error(static_cast<int>(stoke_cublas_status_), #call, __FILE__, __LINE__); \
  } while (false)

/// Like STOKE_CUDNN_CHECK but never throws (for destructors): reports the failure on stderr.
#define STOKE_CUDNN_REPORT(call)                                                                                  \
  do {                                                                                                            \
    const auto stoke_cudnn_status_ = (call);                                                                      \
    if (stoke_cudnn_status_ != 0)                                                                                 \
      ::stoke::gpu::detail::report_cudnn_error(static_cast<int>(stoke_cudnn_status_), #call, __FILE__, __LINE__); \
  } while (false)
