// CudaBackend's elementwise kernels (kernels.hpp says what each computes): relu, add, dropout,
// cast, scale and the count of non-finite elements; grid-stride loops. relu and add, which a
// ResNet runs on every activation, move 16 bytes per load and store (8 bf16/f16 values or 4
// floats) when their pointers allow it: one element per step took 23 of ResNet-50's 340 ms on the
// first GPU run (H200, batch 256, bf16), several times what their bytes cost.
#include <algorithm>
#include <cstdint>

#include "../dropout_mask.hpp"
#include "kernel_utils.cuh"
#include "kernels.hpp"

namespace stoke::nn::cuda {
namespace {

// ---- y = op(a) or op(a, b), element by element, 16 bytes at a time where the pointers allow

// `Packed`: the first n / P elements in packs of P, the rest (and everything when not Packed) one
// by one. b is unused (null) for a one-input op.
template <class T, class Op, bool Packed>
__global__ void map_kernel(Op op, const T* a, const T* b, T* y, std::int64_t n) {
  constexpr int P = kPack<T>;
  const std::int64_t packs = Packed ? n / P : 0;
  if constexpr (Packed) {
    STOKE_GRID_LOOP(i, packs) {
      const Pack<T> pa = reinterpret_cast<const Pack<T>*>(a)[i];
      Pack<T> pb{};
      if constexpr (Op::inputs == 2) pb = reinterpret_cast<const Pack<T>*>(b)[i];
      Pack<T> py;
#pragma unroll
      for (int k = 0; k < P; ++k) store(py.v, k, op(load(pa.v, k), Op::inputs == 2 ? load(pb.v, k) : 0.0f));
      reinterpret_cast<Pack<T>*>(y)[i] = py;
    }
  }
  STOKE_GRID_LOOP(i, n - packs * P) {
    const std::int64_t j = packs * P + i;
    store(y, j, op(load(a, j), Op::inputs == 2 ? load(b, j) : 0.0f));
  }
}

template <class T, class Op>
void launch_map(Op op, const T* a, const T* b, T* y, std::int64_t n, Stream stream) {
  if (aligned16(a) && aligned16(y) && (Op::inputs == 1 || aligned16(b))) {
    const std::int64_t steps = std::max<std::int64_t>(n / kPack<T>, n % kPack<T>);
    map_kernel<T, Op, true><<<blocks_for(steps), kThreads, 0, stream>>>(op, a, b, y, n);
  } else {
    map_kernel<T, Op, false><<<blocks_for(n), kThreads, 0, stream>>>(op, a, b, y, n);
  }
}

// v < 0 ? 0 : v, not max: a NaN goes through (as on the CPU and in PyTorch).
struct Relu {
  static constexpr int inputs = 1;
  __device__ float operator()(float v, float /*unused*/) const { return v < 0.0f ? 0.0f : v; }
};
// (y, dy) -> dy where the output was positive.
struct ReluGradient {
  static constexpr int inputs = 2;
  __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};
struct Sum {
  static constexpr int inputs = 2;
  __device__ float operator()(float a, float b) const { return a + b; }
};

template <class T>
__global__ void dropout_forward_kernel(const T* x, std::uint8_t* mask, T* y, std::int64_t n, std::uint64_t seed,
                                       std::uint64_t threshold, float keep_scale) {
  STOKE_GRID_LOOP(i, n) {
    const bool keep = dropout::keeps(seed, static_cast<std::uint64_t>(i), threshold);
    mask[i] = keep ? 1 : 0;
    store(y, i, keep ? load(x, i) * keep_scale : 0.0f);
  }
}

template <class T>
__global__ void dropout_backward_kernel(const T* dy, const std::uint8_t* mask, T* dx, std::int64_t n,
                                        float keep_scale) {
  STOKE_GRID_LOOP(i, n) store(dx, i, mask[i] != 0 ? load(dy, i) * keep_scale : 0.0f);
}

template <class From, class To>
__global__ void cast_kernel(const From* src, To* dst, std::int64_t n) {
  STOKE_GRID_LOOP(i, n) store(dst, i, load(src, i));
}

template <class T>
__global__ void scale_kernel(T* x, float alpha, std::int64_t n) {
  STOKE_GRID_LOOP(i, n) store(x, i, load(x, i) * alpha);
}

// Bits with an all-ones exponent are an infinity or a NaN (immune to fast-math assumptions).
__device__ __forceinline__ bool finite_bits(const float* p, std::int64_t i) {
  return (__float_as_uint(p[i]) & 0x7f800000u) != 0x7f800000u;
}
__device__ __forceinline__ bool finite_bits(const __nv_bfloat16* p, std::int64_t i) {
  return (__bfloat16_as_ushort(p[i]) & 0x7f80u) != 0x7f80u;
}
__device__ __forceinline__ bool finite_bits(const __half* p, std::int64_t i) {
  return (__half_as_ushort(p[i]) & 0x7c00u) != 0x7c00u;
}

template <class T>
__global__ void count_non_finite_kernel(const T* x, std::int64_t n, unsigned* bad) {
  unsigned mine = 0;
  STOKE_GRID_LOOP(i, n) mine += finite_bits(x, i) ? 0u : 1u;
  if (mine != 0) atomicAdd(bad, mine);  // an integer count: the order does not matter
}

template <class T>
__global__ void flag_non_finite_kernel(const T* x, std::int64_t n, float* state) {
  bool bad = false;
  STOKE_GRID_LOOP(i, n) bad = bad || !finite_bits(x, i);
  if (bad) state[kLossScaleFoundInf] = 1.0f;  // every writer writes the same value
}

__global__ void multiply_by_loss_scale_kernel(float* x, std::int64_t n, const float* state) {
  const float scale = state[kLossScaleScale];
  STOKE_GRID_LOOP(i, n) x[i] *= scale;
}

__global__ void update_loss_scale_kernel(float* state, float growth, float backoff, int growth_interval) {
  if (state[kLossScaleFoundInf] != 0) {
    state[kLossScaleScale] *= backoff;
    state[kLossScaleGoodSteps] = 0;
    state[kLossScaleSkipped] += 1;
  } else {
    state[kLossScaleGoodSteps] += 1;
    if (state[kLossScaleGoodSteps] >= static_cast<float>(growth_interval)) {
      state[kLossScaleScale] *= growth;
      state[kLossScaleGoodSteps] = 0;
    }
  }
}

}  // namespace

void multiply_by_loss_scale(float* x, std::int64_t n, const float* state, Stream stream) {
  if (n == 0) return;
  multiply_by_loss_scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, state);
  check_launch();
}

void flag_non_finite(DType dtype, const void* x, std::int64_t n, float* state, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    flag_non_finite_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), n, state);
  });
  check_launch();
}

void update_loss_scale(float* state, float growth, float backoff, int growth_interval, Stream stream) {
  update_loss_scale_kernel<<<1, 1, 0, stream>>>(state, growth, backoff, growth_interval);
  check_launch();
}

void relu_forward(DType dtype, const void* x, void* y, std::int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(Relu{}, static_cast<const T*>(x), static_cast<const T*>(nullptr), static_cast<T*>(y), n, stream);
  });
  check_launch();
}

void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(ReluGradient{}, static_cast<const T*>(y), static_cast<const T*>(dy), static_cast<T*>(dx), n, stream);
  });
  check_launch();
}

void add(DType dtype, const void* a, const void* b, void* y, std::int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(Sum{}, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n, stream);
  });
  check_launch();
}

void dropout_forward(DType dtype, const void* x, std::uint8_t* mask, void* y, std::int64_t n, std::uint64_t seed,
                     std::uint64_t threshold, float keep_scale, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(x), mask, static_cast<T*>(y), n, seed, threshold, keep_scale);
  });
  check_launch();
}

void dropout_backward(DType dtype, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n, float keep_scale,
                      Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    dropout_backward_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(dy), mask, static_cast<T*>(dx), n, keep_scale);
  });
  check_launch();
}

void cast(DType from, const void* src, DType to, void* dst, std::int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch(from, [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    dispatch(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      cast_kernel<From, To>
          <<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const From*>(src), static_cast<To*>(dst), n);
    });
  });
  check_launch();
}

void scale(DType dtype, void* x, float alpha, std::int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<T*>(x), alpha, n);
  });
  check_launch();
}

void count_non_finite(DType dtype, const void* x, std::int64_t n, unsigned* bad, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    count_non_finite_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), n, bad);
  });
  check_launch();
}

}  // namespace stoke::nn::cuda
