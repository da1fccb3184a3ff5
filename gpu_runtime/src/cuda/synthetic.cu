// The synthetic compute kernel: one block per SM, each spinning on the GPU's global nanosecond
// timer until the duration has passed, so the whole device is busy for that long.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>

#include "cuda_internal.hpp"
#include "stoke/gpu/error.hpp"
#include "stoke/gpu/synthetic.hpp"

namespace stoke::gpu::detail {
namespace {

__device__ __forceinline__ std::uint64_t global_nanoseconds() {
  std::uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

__global__ void spin_kernel(std::uint64_t nanoseconds) {
  __shared__ std::uint64_t start;
  if (threadIdx.x == 0) start = global_nanoseconds();
  __syncthreads();
  if (threadIdx.x == 0) {
    while (global_nanoseconds() - start < nanoseconds) {
    }
  }
}

}  // namespace

void launch_synthetic_work(StreamView stream, std::chrono::nanoseconds duration) {
  const cudaStream_t native = native_stream(stream, "synthetic_work");
  int multiprocessors = 0;
  STOKE_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, stream.device().ordinal()));
  spin_kernel<<<multiprocessors, 32, 0, native>>>(static_cast<std::uint64_t>(duration.count()));
  STOKE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace stoke::gpu::detail
