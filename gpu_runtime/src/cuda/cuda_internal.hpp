// Private helpers of stoke::gpu's CUDA sources (CUDA build only; not installed).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "stoke/gpu/device.hpp"
#include "stoke/gpu/error.hpp"
#include "stoke/gpu/stream.hpp"

namespace stoke::gpu::detail {

/// The cudaStream_t behind `stream`, for `what` (e.g. "copy_async"). Throws DeviceError for the
/// host stream and for a CUDA view without a stream (a moved-from Stream): a null cudaStream_t
/// would mean CUDA's legacy default stream, which stoke never uses.
inline cudaStream_t native_stream(StreamView stream, const char* what) {
  if (stream.is_host())
    throw DeviceError(std::string(what) + " needs a CUDA stream, but was given the host stream (CPU device)");
  if (stream.native() == nullptr)
    throw DeviceError(std::string(what) + " was given a " + stream.device().str() +
                      " StreamView without a stream (a moved-from Stream?); stoke never uses CUDA's legacy default "
                      "stream");
  return stream.native();
}

/// The answer of cudaStreamQuery / cudaEventQuery: true when done, false for cudaErrorNotReady
/// (which is cleared, being no failure), and CudaError for any other status.
inline bool query_done(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return true;
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  throw_cuda_error(status, call, file, line);
}

/// Makes `device` current while a resource of it is released (cudnnDestroy, for one, synchronizes
/// the current device), like DeviceGuard but never throwing: a failure is reported, and the release
/// goes on. For destructors.
class CleanupDeviceScope {
 public:
  explicit CleanupDeviceScope(Device device) noexcept {
    if (!device.is_cuda()) return;
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    if (current == device.ordinal()) return;
    if (const cudaError_t error = cudaSetDevice(device.ordinal()); error != cudaSuccess) {
      report_cuda_error(error, "cudaSetDevice(device.ordinal())", __FILE__, __LINE__);
      return;
    }
    previous_ = current;
  }
  ~CleanupDeviceScope() {
    if (previous_ >= 0) STOKE_CUDA_REPORT(cudaSetDevice(previous_));
  }
  CleanupDeviceScope(const CleanupDeviceScope&) = delete;
  CleanupDeviceScope& operator=(const CleanupDeviceScope&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace stoke::gpu::detail
