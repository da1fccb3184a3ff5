// What the kernel files of CudaBackend (*_kernels.cu) share: element types loaded as float and
// stored rounded to nearest even, the dispatch from a DType to them, grid-stride loops, image
// indexing in either layout and a deterministic block sum in double. Device code: included by
// .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels.hpp"
#include "stoke/nn/device.hpp"

namespace stoke::nn::cuda {

inline constexpr int kThreads = 256;
inline constexpr std::int64_t kMaxBlocks = 65536;

// ---- element types: loaded as float, stored rounded to nearest even
__device__ __forceinline__ float load(const float* p, std::int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, std::int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half* p, std::int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float* p, std::int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, std::int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half* p, std::int64_t i, float v) { p[i] = __float2half_rn(v); }

template <class T>
struct Tag {
  using type = T;
};

// Calls f(Tag<T>{}) with T the device type of `dtype` (f32, bf16 or f16).
template <class F>
void dispatch(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      f(Tag<float>{});
      return;
    case DType::bf16:
      f(Tag<__nv_bfloat16>{});
      return;
    case DType::f16:
      f(Tag<__half>{});
      return;
    default:
      break;
  }
  throw GpuError("nn/ CUDA kernels: dtype " + std::string(to_string(dtype)) + " is not f32, bf16 or f16");
}

inline int blocks_for(std::int64_t n) {
  return static_cast<int>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

inline void check_launch() { STOKE_CUDA_CHECK(cudaGetLastError()); }

// ---- 16-byte packs: kernels that stream through memory load and store 16 bytes per thread (8
// bf16/f16 values or 4 floats) where every pointer of the call is 16-byte aligned (the pool's
// blocks are; a view into one may not be)
template <class T>
inline constexpr int kPack = 16 / static_cast<int>(sizeof(T));
template <class T>
struct alignas(16) Pack {
  T v[kPack<T>];
};
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

#define STOKE_GRID_LOOP(i, n)                                                                      \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

// ---- image indexing
__device__ __forceinline__ std::int64_t offset_of(const ImageDims& d, std::int64_t n, std::int64_t c, std::int64_t h,
                                                  std::int64_t w) {
  return d.nhwc ? ((n * d.h + h) * d.w + w) * d.c + c : ((n * d.c + c) * d.h + h) * d.w + w;
}
// The offset of element j (in [0, N H W)) of channel c: item j / HW, pixel j % HW.
__device__ __forceinline__ std::int64_t channel_offset(const ImageDims& d, std::int64_t c, std::int64_t j) {
  const std::int64_t hw = d.h * d.w;
  const std::int64_t n = j / hw, p = j % hw;
  return d.nhwc ? (n * hw + p) * d.c + c : (n * d.c + c) * hw + p;
}
// Logical coordinates of the element at memory offset i.
struct Coord {
  std::int64_t n, c, h, w;
};
__device__ __forceinline__ Coord coord_of(const ImageDims& d, std::int64_t i) {
  Coord k{};
  if (d.nhwc) {
    k.c = i % d.c;
    i /= d.c;
    k.w = i % d.w;
    i /= d.w;
    k.h = i % d.h;
    k.n = i / d.h;
  } else {
    k.w = i % d.w;
    i /= d.w;
    k.h = i % d.h;
    i /= d.h;
    k.c = i % d.c;
    k.n = i / d.c;
  }
  return k;
}

// The sum of v over the block (kThreads threads), returned to every thread. `shared` holds
// kThreads / 32 doubles; the leading barrier lets a previous call's readers finish first.
__device__ inline double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double total = lane < kThreads / 32 ? shared[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) total += __shfl_down_sync(0xffffffffu, total, o);
    if (lane == 0) shared[0] = total;
  }
  __syncthreads();
  return shared[0];
}

}  // namespace stoke::nn::cuda
