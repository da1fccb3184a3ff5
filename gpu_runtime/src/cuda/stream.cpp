#include "stoke/gpu/stream.hpp"

#include <cuda_runtime_api.h>

#include <utility>

#include "../internal.hpp"
#include "cuda_internal.hpp"
#include "stoke/gpu/event.hpp"

namespace stoke::gpu {

// ---- StreamView ------------------------------------------------------------------------------

void StreamView::synchronize() const {
  if (is_host()) return;
  detail::note_host_wait();
  STOKE_CUDA_CHECK(cudaStreamSynchronize(detail::native_stream(*this, "StreamView::synchronize")));
}

void StreamView::wait(const Event& event) const {
  if (is_host()) return;
  if (event.native() == nullptr)
    throw DeviceError("StreamView::wait was given an empty Event (moved from?) on " + device_.str());
  STOKE_CUDA_CHECK(cudaStreamWaitEvent(detail::native_stream(*this, "StreamView::wait"), event.native(), 0));
}

bool StreamView::ready() const {
  if (is_host()) return true;
  return detail::query_done(cudaStreamQuery(detail::native_stream(*this, "StreamView::ready")),
                            "cudaStreamQuery(stream)", __FILE__, __LINE__);
}

// ---- Stream ----------------------------------------------------------------------------------

Stream::Stream(Device device, StreamPriority priority) : device_(device) {
  detail::require_cuda_device(device, "a Stream");
  const DeviceGuard guard(device);
  int priority_value = 0;  // CUDA's default priority
  if (priority == StreamPriority::high) {
    int least = 0;
    int greatest = 0;  // numerically lowest: lower numbers are higher priorities
    STOKE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    priority_value = greatest;
  }
  cudaStream_t stream = nullptr;
  STOKE_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority_value));
  stream_ = stream;
}

Stream::~Stream() { reset(); }

Stream::Stream(Stream&& other) noexcept : device_(other.device_), stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void Stream::reset() noexcept {
  // Work already enqueued still completes; the stream's resources go once it has.
  if (stream_ != nullptr) STOKE_CUDA_REPORT(cudaStreamDestroy(stream_));
  stream_ = nullptr;
}

}  // namespace stoke::gpu
