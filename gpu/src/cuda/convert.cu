// The kernels of convert: uint8 NHWC of 1 to 3 channels -> f32 / bf16 / f16, NCHW / NHWC, by
// table lookup; and an element-wise kernel for every other input (u16, i16, f32, more channels).
// bf16 and f16 are the f32 value rounded to nearest, ties to even (__float2bfloat16_rn,
// __float2half_rn): for a finite value, bit for bit what the host's bf16_from_float and
// f16_from_float give.
//
// The work is memory-bound: per element, one byte in and two or four bytes out. So each thread
// converts groups of 4 elements (NHWC) or 4 pixels (NCHW) with one 32-bit load per 4 input bytes
// and one 16-byte (f32) or 8-byte (bf16, f16) store per 4 outputs, and handles several groups per
// tile, loading them all before storing any, so that enough loads are in flight to cover DRAM
// latency; consecutive lanes touch consecutive addresses, so loads and stores coalesce. Pointers
// without that alignment, and NCHW outputs whose planes (height * width) are not a multiple of 4
// pixels, take a scalar kernel with the same structure.
//
// The table (3 x 256 floats, computed on the host by convert.cpp) is a by-value kernel parameter,
// so that launches on different streams with different options never share state; each block
// copies it into shared memory once, where the data-dependent lookups are cheap.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "../convert_kernel.hpp"
#include "cuda/cuda_internal.hpp"
#include "stoke/gpu/device.hpp"
#include "stoke/gpu/error.hpp"

namespace stoke::gpu::detail {
namespace {

constexpr int block_threads = 256;
constexpr int groups_per_thread = 4;  // groups of 4 elements (or pixels) per thread per tile
constexpr std::uint64_t tile_groups = static_cast<std::uint64_t>(block_threads) * groups_per_thread;

// Under CUDA's 4 KiB kernel-parameter limit (the table is 3 KiB).
struct KernelArgs {
  ConvertTable table;
  const std::uint8_t* src;
  void* dst;
  std::uint64_t n;       // images
  std::uint64_t pixels;  // height * width
};
static_assert(sizeof(KernelArgs) <= 4096, "kernel parameters must fit CUDA's 4 KiB limit");

// a / b, with 32-bit division when both fit (a 64-bit division is several times slower).
__device__ __forceinline__ std::uint64_t divide(std::uint64_t a, std::uint64_t b) {
  if (((a | b) >> 32) == 0) return static_cast<std::uint32_t>(a) / static_cast<std::uint32_t>(b);
  return a / b;
}

// Copies the first C channels of the table into shared memory, in float4s; every thread of the
// block must call it (it synchronizes the block).
template <int C>
__device__ __forceinline__ void load_table(const ConvertTable& table, float (&shared)[3][256]) {
  const auto* from = reinterpret_cast<const float4*>(&table.values[0][0]);
  auto* to = reinterpret_cast<float4*>(&shared[0][0]);
  for (int i = static_cast<int>(threadIdx.x); i < C * 64; i += block_threads) to[i] = from[i];
  __syncthreads();
}

__device__ __forceinline__ void store_one(float* dst, float value) { *dst = value; }
__device__ __forceinline__ void store_one(__nv_bfloat16* dst, float value) { *dst = __float2bfloat16_rn(value); }
__device__ __forceinline__ void store_one(__half* dst, float value) { *dst = __float2half_rn(value); }

// Two 16-bit outputs packed into one word. Little-endian: the element at the lower address is the
// low half.
__device__ __forceinline__ unsigned pack_two(__nv_bfloat16 low, __nv_bfloat16 high) {
  return static_cast<unsigned>(__bfloat16_as_ushort(low)) | (static_cast<unsigned>(__bfloat16_as_ushort(high)) << 16);
}
__device__ __forceinline__ unsigned pack_two(__half low, __half high) {
  return static_cast<unsigned>(__half_as_ushort(low)) | (static_cast<unsigned>(__half_as_ushort(high)) << 16);
}

// Stores 4 consecutive outputs; dst is 16-byte (f32) or 8-byte (bf16, f16) aligned.
__device__ __forceinline__ void store_four(float* dst, float a, float b, float c, float d) {
  *reinterpret_cast<float4*>(dst) = make_float4(a, b, c, d);
}
__device__ __forceinline__ void store_four(__nv_bfloat16* dst, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_two(__float2bfloat16_rn(a), __float2bfloat16_rn(b)),
                                              pack_two(__float2bfloat16_rn(c), __float2bfloat16_rn(d)));
}
__device__ __forceinline__ void store_four(__half* dst, float a, float b, float c, float d) {
  *reinterpret_cast<uint2*>(dst) =
      make_uint2(pack_two(__float2half_rn(a), __float2half_rn(b)), pack_two(__float2half_rn(c), __float2half_rn(d)));
}

__device__ __forceinline__ unsigned byte_of(unsigned word, int k) { return (word >> (8 * k)) & 0xffu; }

// NHWC output, aligned: output element e is table[e % C][src[e]]. Group g is elements 4g..4g+3.
template <class Out, int C>
__global__ void __launch_bounds__(block_threads) nhwc_vector_kernel(const __grid_constant__ KernelArgs args) {
  __shared__ __align__(16) float table[3][256];
  load_table<C>(args.table, table);
  const std::uint64_t elements = args.n * args.pixels * C;
  const std::uint64_t groups = elements / 4;
  const auto* __restrict__ src = reinterpret_cast<const unsigned*>(args.src);
  Out* __restrict__ dst = static_cast<Out*>(args.dst);

  for (std::uint64_t base = blockIdx.x * tile_groups; base < groups; base += gridDim.x * tile_groups) {
    unsigned words[groups_per_thread];
#pragma unroll
    for (int k = 0; k < groups_per_thread; ++k) {
      const std::uint64_t g = base + static_cast<std::uint64_t>(k) * block_threads + threadIdx.x;
      words[k] = g < groups ? __ldg(src + g) : 0u;
    }
#pragma unroll
    for (int k = 0; k < groups_per_thread; ++k) {
      const std::uint64_t g = base + static_cast<std::uint64_t>(k) * block_threads + threadIdx.x;
      if (g >= groups) continue;
      float values[4];
      int c = static_cast<int>((4 * g) % C);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        values[i] = table[c][byte_of(words[k], i)];
        c = c + 1 == C ? 0 : c + 1;
      }
      store_four(dst + 4 * g, values[0], values[1], values[2], values[3]);
    }
  }
  // The last elements % 4 elements.
  const std::uint64_t tail = groups * 4 + threadIdx.x;
  if (blockIdx.x == 0 && tail < elements) store_one(dst + tail, table[tail % C][args.src[tail]]);
}

// NHWC output, any alignment: one element per step.
template <class Out, int C>
__global__ void __launch_bounds__(block_threads) nhwc_scalar_kernel(const __grid_constant__ KernelArgs args) {
  __shared__ __align__(16) float table[3][256];
  load_table<C>(args.table, table);
  const std::uint64_t elements = args.n * args.pixels * C;
  const std::uint8_t* __restrict__ src = args.src;
  Out* __restrict__ dst = static_cast<Out*>(args.dst);

  for (std::uint64_t base = blockIdx.x * tile_groups; base < elements; base += gridDim.x * tile_groups) {
    unsigned bytes[groups_per_thread];
#pragma unroll
    for (int k = 0; k < groups_per_thread; ++k) {
      const std::uint64_t e = base + static_cast<std::uint64_t>(k) * block_threads + threadIdx.x;
      bytes[k] = e < elements ? __ldg(src + e) : 0u;
    }
#pragma unroll
    for (int k = 0; k < groups_per_thread; ++k) {
      const std::uint64_t e = base + static_cast<std::uint64_t>(k) * block_threads + threadIdx.x;
      if (e < elements) store_one(dst + e, table[e % C][bytes[k]]);
    }
  }
}

// NCHW output, aligned, pixels % 4 == 0: group g is pixels 4g..4g+3 of the whole batch, all in one
// image, whose 4 * C input bytes are C aligned words; it writes 4 outputs to each of C planes.
template <class Out, int C>
__global__ void __launch_bounds__(block_threads) nchw_vector_kernel(const __grid_constant__ KernelArgs args) {
  __shared__ __align__(16) float table[3][256];
  load_table<C>(args.table, table);
  const std::uint64_t groups = args.n * args.pixels / 4;
  const auto* __restrict__ src = reinterpret_cast<const unsigned*>(args.src);
  Out* __restrict__ dst = static_cast<Out*>(args.dst);

  for (std::uint64_t base = blockIdx.x * tile_groups; base < groups; base += gridDim.x * tile_groups) {
    unsigned words[groups_per_thread][C];
#pragma unroll
    for (int k = 0; k < groups_per_thread; ++k) {
      const std::uint64_t g = base + static_cast<std::uint64_t>(k) * block_threads + threadIdx.x;
#pragma unroll
      for (int j = 0; j < C; ++j) words[k][j] = g < groups ? __ldg(src + g * C + j) : 0u;
    }
#pragma unroll
    for (int k = 0; k < groups_per_thread; ++k) {
      const std::uint64_t g = base + static_cast<std::uint64_t>(k) * block_threads + threadIdx.x;
      if (g >= groups) continue;
      const std::uint64_t q = 4 * g;  // the first pixel, counted over the batch
      const std::uint64_t image = divide(q, args.pixels);
      const std::uint64_t p = q - image * args.pixels;
      Out* out = dst + image * C * args.pixels + p;
#pragma unroll
      for (int c = 0; c < C; ++c) {
        // Byte i * C + c of the group is pixel i's channel c.
        float values[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) values[i] = table[c][byte_of(words[k][(i * C + c) / 4], (i * C + c) % 4)];
        store_four(out + c * args.pixels, values[0], values[1], values[2], values[3]);
      }
    }
  }
}

// NCHW output, any alignment or plane size: one pixel per step.
template <class Out, int C>
__global__ void __launch_bounds__(block_threads) nchw_scalar_kernel(const __grid_constant__ KernelArgs args) {
  __shared__ __align__(16) float table[3][256];
  load_table<C>(args.table, table);
  const std::uint64_t pixels = args.n * args.pixels;
  const std::uint8_t* __restrict__ src = args.src;
  Out* __restrict__ dst = static_cast<Out*>(args.dst);

  for (std::uint64_t base = blockIdx.x * tile_groups; base < pixels; base += gridDim.x * tile_groups) {
    unsigned bytes[groups_per_thread][C];
#pragma unroll
    for (int k = 0; k < groups_per_thread; ++k) {
      const std::uint64_t q = base + static_cast<std::uint64_t>(k) * block_threads + threadIdx.x;
#pragma unroll
      for (int c = 0; c < C; ++c) bytes[k][c] = q < pixels ? __ldg(src + q * C + c) : 0u;
    }
#pragma unroll
    for (int k = 0; k < groups_per_thread; ++k) {
      const std::uint64_t q = base + static_cast<std::uint64_t>(k) * block_threads + threadIdx.x;
      if (q >= pixels) continue;
      const std::uint64_t image = divide(q, args.pixels);
      const std::uint64_t p = q - image * args.pixels;
      Out* out = dst + image * C * args.pixels + p;
#pragma unroll
      for (int c = 0; c < C; ++c) store_one(out + c * args.pixels, table[c][bytes[k][c]]);
    }
  }
}

// Any convertible input, any channel count: one element per step, the expression computed as the
// host computes it (IEEE division: nvcc's default -prec-div=true).
struct AnyArgs {
  ConvertParams params;
  const void* src;
  void* dst;
  std::uint64_t n;
  std::uint64_t pixels;
  int channels;
};

template <class In, class Out>
__global__ void __launch_bounds__(block_threads) any_kernel(const __grid_constant__ AnyArgs args, TensorLayout layout) {
  const auto C = static_cast<std::uint64_t>(args.channels);
  const std::uint64_t elements = args.n * args.pixels * C;
  const In* __restrict__ src = static_cast<const In*>(args.src);
  Out* __restrict__ dst = static_cast<Out*>(args.dst);
  for (std::uint64_t e = blockIdx.x * static_cast<std::uint64_t>(block_threads) + threadIdx.x; e < elements;
       e += static_cast<std::uint64_t>(gridDim.x) * block_threads) {
    // e indexes the input (NHWC): image, pixel, channel.
    const std::uint64_t image_pixel = divide(e, C);
    const auto c = static_cast<int>(e - image_pixel * C);
    const float value = (static_cast<float>(src[e]) / args.params.range - args.params.mean[c]) / args.params.stddev[c];
    std::uint64_t at = e;
    if (layout == TensorLayout::nchw) {
      const std::uint64_t image = divide(image_pixel, args.pixels);
      const std::uint64_t p = image_pixel - image * args.pixels;
      at = (image * C + static_cast<std::uint64_t>(c)) * args.pixels + p;
    }
    store_one(dst + at, value);
  }
}

template <class In>
void launch_any(const AnyArgs& args, DType dtype, TensorLayout layout, int sms, cudaStream_t stream) {
  void (*kernel)(AnyArgs, TensorLayout) = dtype == DType::bf16  ? any_kernel<In, __nv_bfloat16>
                                          : dtype == DType::f16 ? any_kernel<In, __half>
                                                                : any_kernel<In, float>;
  int blocks_per_sm = 0;
  STOKE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, block_threads, 0));
  const std::uint64_t elements = args.n * args.pixels * static_cast<std::uint64_t>(args.channels);
  const auto max_blocks =
      static_cast<std::uint64_t>(std::max(1, sms)) * static_cast<std::uint64_t>(std::max(1, blocks_per_sm));
  const std::uint64_t needed = std::max<std::uint64_t>(1, (elements + block_threads - 1) / block_threads);
  kernel<<<static_cast<unsigned>(std::min(needed, max_blocks)), block_threads, 0, stream>>>(args, layout);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

bool aligned(const void* pointer, std::uintptr_t alignment) {
  return reinterpret_cast<std::uintptr_t>(pointer) % alignment == 0;
}

template <class Out, int C>
void launch(const KernelArgs& args, TensorLayout layout, int sms, cudaStream_t stream) {
  const bool vector_io = aligned(args.src, 4) && aligned(args.dst, 4 * sizeof(Out));
  const std::uint64_t elements = args.n * args.pixels * C;
  void (*kernel)(KernelArgs) = nullptr;
  std::uint64_t work = 0;  // groups or single steps, tile_groups per block per tile
  if (layout == TensorLayout::nhwc) {
    if (vector_io) {
      kernel = nhwc_vector_kernel<Out, C>;
      work = elements / 4;
    } else {
      kernel = nhwc_scalar_kernel<Out, C>;
      work = elements;
    }
  } else {
    if (vector_io && args.pixels % 4 == 0) {
      kernel = nchw_vector_kernel<Out, C>;
      work = args.n * args.pixels / 4;
    } else {
      kernel = nchw_scalar_kernel<Out, C>;
      work = args.n * args.pixels;
    }
  }
  // As many blocks as are resident at once (more would only run after the first wave, each
  // loading the table again), fewer for small work; at least one: the NHWC vector kernel's block 0
  // also converts the tail when there are fewer than 4 elements.
  int blocks_per_sm = 0;
  STOKE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, block_threads, 0));
  const auto max_blocks =
      static_cast<std::uint64_t>(std::max(1, sms)) * static_cast<std::uint64_t>(std::max(1, blocks_per_sm));
  const std::uint64_t tiles = std::max<std::uint64_t>(1, (work + tile_groups - 1) / tile_groups);
  const auto blocks = static_cast<unsigned>(std::min(tiles, max_blocks));
  kernel<<<blocks, block_threads, 0, stream>>>(args);
  STOKE_CUDA_CHECK(cudaGetLastError());
}

template <class Out>
void launch_for_channels(const KernelArgs& args, int channels, TensorLayout layout, int sms, cudaStream_t stream) {
  switch (channels) {
    case 1:
      launch<Out, 1>(args, layout, sms, stream);
      break;
    case 2:
      launch<Out, 2>(args, layout, sms, stream);
      break;
    default:
      launch<Out, 3>(args, layout, sms, stream);
      break;
  }
}

}  // namespace

void launch_convert(const void* src, DType src_dtype, void* dst, std::size_t n, int height, int width, int channels,
                    const ConvertParams& params, DType dtype, TensorLayout layout, StreamView stream) {
  const cudaStream_t native = native_stream(stream, "convert");  // never the legacy default stream
  const DeviceGuard guard(stream.device());
  int sms = 0;
  STOKE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, stream.device().ordinal()));
  const AnyArgs args{params, src, dst, n, static_cast<std::uint64_t>(height) * static_cast<std::uint64_t>(width),
                     channels};
  switch (src_dtype) {
    case DType::u8:
      launch_any<std::uint8_t>(args, dtype, layout, sms, native);
      break;
    case DType::u16:
      launch_any<std::uint16_t>(args, dtype, layout, sms, native);
      break;
    case DType::i16:
      launch_any<std::int16_t>(args, dtype, layout, sms, native);
      break;
    default:
      launch_any<float>(args, dtype, layout, sms, native);
      break;
  }
}

void launch_convert_u8(const std::uint8_t* src, void* dst, std::size_t n, int height, int width, int channels,
                       const ConvertTable& table, DType dtype, TensorLayout layout, StreamView stream) {
  const cudaStream_t native = native_stream(stream, "convert_u8");  // never the legacy default stream
  const DeviceGuard guard(stream.device());  // a kernel must be launched with its stream's device current
  int sms = 0;
  STOKE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, stream.device().ordinal()));

  const KernelArgs args{table, src, dst, n, static_cast<std::uint64_t>(height) * static_cast<std::uint64_t>(width)};
  if (dtype == DType::bf16) {
    launch_for_channels<__nv_bfloat16>(args, channels, layout, sms, native);
  } else if (dtype == DType::f16) {
    launch_for_channels<__half>(args, channels, layout, sms, native);
  } else {
    launch_for_channels<float>(args, channels, layout, sms, native);
  }
}

}  // namespace stoke::gpu::detail
