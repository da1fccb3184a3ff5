// A simulated CUDA runtime, for running stoke's CUDA code paths on a machine without a GPU (test
// only). fake_cudart.cpp defines, with C linkage and the signatures of CUDA's own headers, the
// runtime functions stoke calls, for one device "cuda:0" whose memory is host memory and whose
// streams are threads; this header is its extension API, for what a real runtime does on the GPU
// (kernels) and for tests that look inside.
//
//   // a sim "kernel": runs on the stream's thread after the work enqueued before it
//   STOKE_CUDA_CHECK(stoke::gpu::sim::enqueue(stream.native(), [=] { std::memset(out, 0, bytes); }));
//
// What it models, as CUDA documents it:
// - Streams: each runs its work in order on a thread of its own; different streams run concurrently.
//   Copies and fills take a little time (set_copy_latency) before their bytes move, so work really
//   is asynchronous. The legacy default stream (a null cudaStream_t) is refused: stoke never uses it.
// - Copies: a pageable source is staged at the call (CUDA's staging buffer); a pageable destination
//   is written when the stream gets there, so a caller must synchronize before reading it.
// - Events: a record completes when its stream reaches it, with a steady_clock timestamp; queries,
//   synchronize and cudaStreamWaitEvent refer to the latest record made before the call; elapsed
//   time needs two completed records of timing events.
// - Memory: cudaMalloc'd bytes are counted against 8 GiB, so an over-large cudaMalloc fails with
//   cudaErrorMemoryAllocation; cudaFree and cudaFreeHost first wait for all enqueued work (CUDA
//   synchronizes the device there). Copies and fills that overrun an allocation are refused
//   (cudaErrorInvalidValue, with a line on stderr).
// - Errors: a failed call sets the calling thread's last error (cudaGetLastError clears it); an
//   unknown handle (destroyed, or never made) gives cudaErrorInvalidResourceHandle and a line on
//   stderr. Work that throws on a stream, or fail_device(), leaves a sticky error that every later
//   call returns, as a faulting kernel does, until reset_device().
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <functional>

namespace stoke::gpu::sim {

/// Enqueues `work` on `stream` like a kernel launch: it runs on the stream's thread after the work
/// enqueued before it, and an event recorded after it completes only once it has run. Returns
/// cudaErrorInvalidResourceHandle (and sets the thread's last error) for a null or unknown stream,
/// or the device's sticky error. If `work` throws, the device takes the sticky error
/// cudaErrorLaunchFailure. Thread-safe.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work);

/// What a kernel may touch: cudaSuccess when [pointer, pointer + bytes) lies inside one live
/// cudaMalloc or cudaHostAlloc block, else cudaErrorIllegalAddress (which a real kernel would hit
/// reading it) with a line on stderr naming `what`.
cudaError_t check_kernel_access(const void* pointer, std::size_t bytes, const char* what);

/// Bytes allocated with cudaMalloc and not freed yet.
std::size_t device_bytes_in_use();

/// cudaHostAlloc blocks not freed yet.
std::size_t host_blocks_in_use();

/// Lets the next `successes` cudaHostAlloc calls succeed and fails the ones after them with
/// cudaErrorMemoryAllocation (pinned memory exhausted), until reset_device(). Negative: none fail.
void fail_host_alloc_after(int successes);

/// How long each copy and fill waits on its stream before moving its bytes (default 50 us).
void set_copy_latency(std::chrono::microseconds latency);

/// Makes the device fail once `stream` reaches this point, as a kernel that faults does: from then
/// on every call returns `error` (e.g. cudaErrorIllegalAddress), waits end with it, and work not
/// yet run never runs.
cudaError_t fail_device(cudaStream_t stream, cudaError_t error);

/// Simulates the machine's NVIDIA driver: `version` is the CUDA version it supports (12040 for
/// 12.4), 0 for no driver at all. Below the runtime's own version (CUDART_VERSION, the default),
/// cudaGetDeviceCount fails with cudaErrorInsufficientDriver, as CUDA's does for both a missing
/// and an old driver, and cudaDriverGetVersion reports `version`. reset_device() restores it.
void set_driver_version(int version);

/// Clears the sticky error (what cudaDeviceReset does for a real device, minus destroying the
/// handles, which their owners still release), fail_host_alloc_after() and set_driver_version().
void reset_device();

}  // namespace stoke::gpu::sim
