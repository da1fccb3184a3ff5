#include "stoke/gpu/event.hpp"

#include <cuda_runtime_api.h>

#include <utility>

#include "../internal.hpp"
#include "cuda_internal.hpp"

namespace stoke::gpu {

Event::Event(Device device, EventOptions options) : device_(device) {
  detail::require_cuda_device(device, "an Event");
  const DeviceGuard guard(device);
  unsigned int flags = options.timing ? cudaEventDefault : cudaEventDisableTiming;
  if (options.blocking_sync) flags |= cudaEventBlockingSync;
  cudaEvent_t event = nullptr;
  STOKE_CUDA_CHECK(cudaEventCreateWithFlags(&event, flags));
  event_ = event;
}

Event::~Event() { reset(); }

Event::Event(Event&& other) noexcept : device_(other.device_), event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void Event::reset() noexcept {
  if (event_ != nullptr) STOKE_CUDA_REPORT(cudaEventDestroy(event_));
  event_ = nullptr;
}

void Event::record(StreamView stream) {
  if (event_ == nullptr) throw DeviceError("Event::record on an empty Event (moved from?)");
  const cudaStream_t native = detail::native_stream(stream, "Event::record");
  if (stream.device() != device_)
    throw DeviceError("Event::record: the event belongs to " + device_.str() + " but the stream to " +
                      stream.device().str() + "; record it on a stream of its own device");
  STOKE_CUDA_CHECK(cudaEventRecord(event_, native));
}

bool Event::ready() const {
  if (event_ == nullptr) throw DeviceError("Event::ready on an empty Event (moved from?)");
  return detail::query_done(cudaEventQuery(event_), "cudaEventQuery(event_)", __FILE__, __LINE__);
}

void Event::synchronize() const {
  if (event_ == nullptr) throw DeviceError("Event::synchronize on an empty Event (moved from?)");
  detail::note_host_wait();
  STOKE_CUDA_CHECK(cudaEventSynchronize(event_));
}

std::chrono::duration<double, std::milli> Event::elapsed(const Event& start, const Event& end) {
  if (start.event_ == nullptr || end.event_ == nullptr)
    throw DeviceError("Event::elapsed needs two recorded events, but was given an empty one (moved from?)");
  float milliseconds = 0.0F;
  // Fails with cudaErrorInvalidResourceHandle when an event was made without EventOptions::timing,
  // and cudaErrorNotReady while one has not completed.
  STOKE_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start.event_, end.event_));
  return std::chrono::duration<double, std::milli>(static_cast<double>(milliseconds));
}

}  // namespace stoke::gpu
