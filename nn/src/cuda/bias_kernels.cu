// The per-channel kernels of the convolution and Linear (kernels.hpp): the bias added to every
// element of its channel, and the bias gradient, summed per channel by one block in double (no
// floating-point atomics, so the sum is the same on every run).
#include <cstdint>

#include "kernel_utils.cuh"
#include "kernels.hpp"

namespace stoke::nn::cuda {
namespace {

template <class T>
__global__ void add_channel_bias_kernel(T* y, const T* b, ImageDims d) {
  const std::int64_t total = d.n * d.c * d.h * d.w;
  const std::int64_t hw = d.h * d.w;
  STOKE_GRID_LOOP(i, total) {
    const std::int64_t c = d.nhwc ? i % d.c : (i / hw) % d.c;
    store(y, i, load(y, i) + load(b, c));
  }
}

// One block per channel.
template <class T>
__global__ void channel_sums_kernel(const T* dy, T* db, ImageDims d) {
  __shared__ double shared[kThreads / 32];
  const std::int64_t c = blockIdx.x;
  const std::int64_t m = d.n * d.h * d.w;
  double sum = 0;
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads) sum += load(dy, channel_offset(d, c, j));
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) store(db, c, static_cast<float>(static_cast<double>(load(db, c)) + sum));
}

}  // namespace

void add_channel_bias(DType dtype, void* y, const void* b, ImageDims dims, Stream stream) {
  const std::int64_t n = dims.n * dims.c * dims.h * dims.w;
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_channel_bias_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(b), dims);
  });
  check_launch();
}

void accumulate_channel_sums(DType dtype, const void* dy, void* db, ImageDims dims, Stream stream) {
  if (dims.c == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    channel_sums_kernel<T>
        <<<static_cast<unsigned>(dims.c), kThreads, 0, stream>>>(static_cast<const T*>(dy), static_cast<T*>(db), dims);
  });
  check_launch();
}

}  // namespace stoke::nn::cuda
