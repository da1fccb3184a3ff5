// The plain kernels of CudaBackend (kernels.hpp says what each computes). They are simple on
// purpose: grid-stride loops for elementwise work, one block per channel for per-channel sums,
// one block per row for the loss, and sums in double (cheap on the data-centre GPUs stoke trains
// on) so that results agree with the CPU reference, which also sums in double. Per-channel and
// per-row sums are deterministic: no floating-point atomics anywhere.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "../dropout_mask.hpp"
#include "kernels.hpp"
#include "stoke/nn/device.hpp"

namespace stoke::nn::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;

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

int blocks_for(std::int64_t n) {
  return static_cast<int>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

void check_launch() { STOKE_CUDA_CHECK(cudaGetLastError()); }

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
__device__ double block_sum(double v, double* shared) {
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

// ---- elementwise

template <class T>
__global__ void relu_forward_kernel(const T* x, T* y, std::int64_t n) {
  // v < 0 ? 0 : v, not max: a NaN goes through (as on the CPU and in PyTorch).
  STOKE_GRID_LOOP(i, n) {
    const float v = load(x, i);
    store(y, i, v < 0.0f ? 0.0f : v);
  }
}

template <class T>
__global__ void relu_backward_kernel(const T* y, const T* dy, T* dx, std::int64_t n) {
  STOKE_GRID_LOOP(i, n) store(dx, i, load(y, i) > 0.0f ? load(dy, i) : 0.0f);
}

template <class T>
__global__ void add_kernel(const T* a, const T* b, T* y, std::int64_t n) {
  STOKE_GRID_LOOP(i, n) store(y, i, load(a, i) + load(b, i));
}

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

__global__ void sgd_kernel(float* param, const float* grad, float* buffer, std::int64_t n, float lr, float momentum,
                           float weight_decay, bool nesterov, float grad_scale) {
  STOKE_GRID_LOOP(i, n) {
    const float g = grad[i] * grad_scale + weight_decay * param[i];
    float update = g;
    if (buffer != nullptr) {
      const float b = momentum * buffer[i] + g;
      buffer[i] = b;
      update = nesterov ? g + momentum * b : b;
    }
    param[i] -= lr * update;
  }
}

// ---- per channel

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

// ---- batch normalisation: one block per channel

template <class T>
__global__ void bn_training_kernel(const T* x, const float* gamma, const float* beta, float* running_mean,
                                   float* running_var, double momentum, double eps, T* y, float* saved_mean,
                                   float* saved_invstd, ImageDims d) {
  __shared__ double shared[kThreads / 32];
  const std::int64_t c = blockIdx.x;
  const std::int64_t m = d.n * d.h * d.w;
  double sum = 0;
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads) sum += load(x, channel_offset(d, c, j));
  const double mean = block_sum(sum, shared) / static_cast<double>(m);
  // A second pass for the variance: sum((x - mean)^2) does not cancel as E[x^2] - mean^2 can.
  double squares = 0;
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads) {
    const double dev = static_cast<double>(load(x, channel_offset(d, c, j))) - mean;
    squares += dev * dev;
  }
  squares = block_sum(squares, shared);
  const double invstd = 1.0 / sqrt(squares / static_cast<double>(m) + eps);
  if (threadIdx.x == 0) {
    saved_mean[c] = static_cast<float>(mean);
    saved_invstd[c] = static_cast<float>(invstd);
    // PyTorch normalises with the biased variance but keeps the unbiased one as running_var.
    const double unbiased = squares / static_cast<double>(m - 1);
    running_mean[c] = static_cast<float>((1 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
    running_var[c] = static_cast<float>((1 - momentum) * static_cast<double>(running_var[c]) + momentum * unbiased);
  }
  const auto scale = static_cast<float>(static_cast<double>(gamma[c]) * invstd);
  const auto mean_f = static_cast<float>(mean);
  const float shift = beta[c];
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads) {
    const std::int64_t at = channel_offset(d, c, j);
    store(y, at, (load(x, at) - mean_f) * scale + shift);
  }
}

template <class T>
__global__ void bn_inference_kernel(const T* x, const float* gamma, const float* beta, const float* running_mean,
                                    const float* running_var, double eps, T* y, ImageDims d) {
  const std::int64_t total = d.n * d.c * d.h * d.w;
  const std::int64_t hw = d.h * d.w;
  STOKE_GRID_LOOP(i, total) {
    const std::int64_t c = d.nhwc ? i % d.c : (i / hw) % d.c;
    const float scale = gamma[c] * rsqrtf(static_cast<float>(static_cast<double>(running_var[c]) + eps));
    store(y, i, (load(x, i) - running_mean[c]) * scale + beta[c]);
  }
}

template <class T>
__global__ void bn_backward_kernel(const T* x, const T* dy, const float* gamma, const float* saved_mean,
                                   const float* saved_invstd, T* dx, float* dgamma, float* dbeta, ImageDims d) {
  __shared__ double shared[kThreads / 32];
  const std::int64_t c = blockIdx.x;
  const std::int64_t m = d.n * d.h * d.w;
  const double mean = saved_mean[c];
  const double invstd = saved_invstd[c];
  double sum_dy = 0;
  double sum_dy_xhat = 0;
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads) {
    const std::int64_t at = channel_offset(d, c, j);
    const double g = load(dy, at);
    sum_dy += g;
    sum_dy_xhat += g * ((static_cast<double>(load(x, at)) - mean) * invstd);
  }
  sum_dy = block_sum(sum_dy, shared);
  sum_dy_xhat = block_sum(sum_dy_xhat, shared);
  if (threadIdx.x == 0) {
    if (dgamma != nullptr) dgamma[c] = static_cast<float>(static_cast<double>(dgamma[c]) + sum_dy_xhat);
    if (dbeta != nullptr) dbeta[c] = static_cast<float>(static_cast<double>(dbeta[c]) + sum_dy);
  }
  if (dx == nullptr) return;
  // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)).
  const auto scale = static_cast<float>(static_cast<double>(gamma[c]) * invstd);
  const auto mean_dy = static_cast<float>(sum_dy / static_cast<double>(m));
  const auto mean_dy_xhat = static_cast<float>(sum_dy_xhat / static_cast<double>(m));
  const auto mean_f = static_cast<float>(mean);
  const auto invstd_f = static_cast<float>(invstd);
  for (std::int64_t j = threadIdx.x; j < m; j += kThreads) {
    const std::int64_t at = channel_offset(d, c, j);
    const float xhat = (load(x, at) - mean_f) * invstd_f;
    store(dx, at, scale * (load(dy, at) - mean_dy - xhat * mean_dy_xhat));
  }
}

// ---- pooling

// The (h, w) of the maximum of output cell (oh, ow)'s window in plane (n, c), h = -1 when the
// window holds no real cell. The scan and its tie-breaking are the CPU's: padded cells never take
// part, the first maximum in row-major order wins, and a NaN wins over numbers.
template <class T>
__device__ void window_argmax(const PoolWindow& g, const T* x, const ImageDims& d, std::int64_t n, std::int64_t c,
                              std::int64_t oh, std::int64_t ow, std::int64_t& best_h, std::int64_t& best_w,
                              float& best) {
  const std::int64_t h0 = oh * g.stride - g.padding;
  const std::int64_t w0 = ow * g.stride - g.padding;
  const std::int64_t h_end = min(h0 + g.kernel, d.h);
  const std::int64_t w_end = min(w0 + g.kernel, d.w);
  best_h = -1;
  best_w = -1;
  best = -INFINITY;
  for (std::int64_t h = max(h0, std::int64_t{0}); h < h_end; ++h) {
    for (std::int64_t w = max(w0, std::int64_t{0}); w < w_end; ++w) {
      const float v = load(x, offset_of(d, n, c, h, w));
      if (best_h < 0 || v > best || (isnan(v) && !isnan(best))) {
        best = v;
        best_h = h;
        best_w = w;
      }
    }
  }
}

template <class T>
__global__ void max_pool_forward_kernel(PoolWindow g, const T* x, ImageDims in, T* y, ImageDims out) {
  const std::int64_t total = out.n * out.c * out.h * out.w;
  STOKE_GRID_LOOP(i, total) {
    const Coord k = coord_of(out, i);
    std::int64_t bh = 0, bw = 0;
    float best = 0;
    window_argmax(g, x, in, k.n, k.c, k.h, k.w, bh, bw, best);
    store(y, i, best);
  }
}

// Each input cell sums dy over the windows whose maximum it is: windows oh with
// oh * s - p <= h < oh * s - p + k.
template <class T>
__global__ void max_pool_backward_kernel(PoolWindow g, const T* x, ImageDims in, const T* dy, ImageDims out, T* dx) {
  const std::int64_t total = in.n * in.c * in.h * in.w;
  STOKE_GRID_LOOP(i, total) {
    const Coord k = coord_of(in, i);
    float sum = 0;
    for (std::int64_t oh = min(out.h - 1, (k.h + g.padding) / g.stride);
         oh >= 0 && oh * g.stride - g.padding + g.kernel > k.h; --oh) {
      for (std::int64_t ow = min(out.w - 1, (k.w + g.padding) / g.stride);
           ow >= 0 && ow * g.stride - g.padding + g.kernel > k.w; --ow) {
        std::int64_t bh = 0, bw = 0;
        float best = 0;
        window_argmax(g, x, in, k.n, k.c, oh, ow, bh, bw, best);
        if (bh == k.h && bw == k.w) sum += load(dy, offset_of(out, k.n, k.c, oh, ow));
      }
    }
    store(dx, i, sum);
  }
}

// One warp per (item, channel) plane.
template <class T>
__global__ void global_avg_pool_forward_kernel(const T* x, ImageDims d, T* y) {
  const std::int64_t planes = d.n * d.c;
  const std::int64_t plane = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  if (plane >= planes) return;  // whole warps leave together: planes are warp-aligned
  const std::int64_t n = plane / d.c, c = plane % d.c;
  const std::int64_t hw = d.h * d.w;
  double sum = 0;
  for (std::int64_t p = lane; p < hw; p += 32) sum += load(x, offset_of(d, n, c, p / d.w, p % d.w));
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
  if (lane == 0) store(y, plane, hw > 0 ? static_cast<float>(sum / static_cast<double>(hw)) : 0.0f);
}

template <class T>
__global__ void global_avg_pool_backward_kernel(const T* dy, T* dx, ImageDims d) {
  const std::int64_t total = d.n * d.c * d.h * d.w;
  const auto area = static_cast<float>(d.h * d.w);
  STOKE_GRID_LOOP(i, total) {
    const Coord k = coord_of(d, i);
    store(dx, i, load(dy, k.n * d.c + k.c) / area);
  }
}

// ---- loss: one block per row, then one block for the mean

template <class T>
__global__ void softmax_cross_entropy_kernel(const T* logits, const std::int32_t* labels, std::int64_t classes,
                                             float smoothing, float gradient_scale, float* row_stats, T* dlogits) {
  __shared__ double shared[kThreads / 32];
  __shared__ float best_value[kThreads];
  __shared__ std::int64_t best_index[kThreads];
  const std::int64_t row = blockIdx.x;
  const T* z = logits + row * classes;
  // The first maximum, as torch.argmax (and the CPU) pick it: ties go to the smaller index.
  float best = -INFINITY;
  std::int64_t best_at = -1;
  for (std::int64_t j = threadIdx.x; j < classes; j += kThreads) {
    const float v = load(z, j);
    if (best_at < 0 || v > best) {
      best = v;
      best_at = j;
    }
  }
  best_value[threadIdx.x] = best;
  best_index[threadIdx.x] = best_at;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) {
      const float other = best_value[threadIdx.x + stride];
      const std::int64_t other_at = best_index[threadIdx.x + stride];
      const std::int64_t mine_at = best_index[threadIdx.x];
      if (other_at >= 0 && (mine_at < 0 || other > best_value[threadIdx.x] ||
                            (other == best_value[threadIdx.x] && other_at < mine_at))) {
        best_value[threadIdx.x] = other;
        best_index[threadIdx.x] = other_at;
      }
    }
    __syncthreads();
  }
  const float max = best_value[0];
  const std::int64_t arg_max = best_index[0];

  double sum_exp = 0;
  double sum_shifted = 0;  // sum_k (z_k - max)
  for (std::int64_t j = threadIdx.x; j < classes; j += kThreads) {
    const float shifted = load(z, j) - max;
    sum_exp += static_cast<double>(expf(shifted));
    sum_shifted += shifted;
  }
  sum_exp = block_sum(sum_exp, shared);
  sum_shifted = block_sum(sum_shifted, shared);
  const double log_sum = log(sum_exp);
  const std::int32_t label = labels[row];
  const bool bad_label = label < 0 || label >= classes;
  const double s = smoothing;
  const double off_target = s / static_cast<double>(classes);
  if (threadIdx.x == 0) {
    if (bad_label) {
      // No exception can leave a kernel: a NaN loss is the report (kernels.hpp).
      row_stats[2 * row] = NAN;
      row_stats[2 * row + 1] = 0;
    } else {
      const double log_p_label = (static_cast<double>(load(z, label)) - max) - log_sum;
      const double sum_log_p = sum_shifted - static_cast<double>(classes) * log_sum;
      row_stats[2 * row] = static_cast<float>(-(1 - s) * log_p_label - off_target * sum_log_p);
      row_stats[2 * row + 1] = arg_max == label ? 1.0f : 0.0f;
    }
  }
  if (dlogits == nullptr) return;
  T* grad = dlogits + row * classes;
  const auto log_sum_f = static_cast<float>(log_sum);
  for (std::int64_t j = threadIdx.x; j < classes; j += kThreads) {
    if (bad_label) {
      store(grad, j, NAN);
      continue;
    }
    const float p = expf((load(z, j) - max) - log_sum_f);
    const double target = off_target + (j == label ? 1 - s : 0.0);
    store(grad, j, static_cast<float>(static_cast<double>(gradient_scale) * (static_cast<double>(p) - target)));
  }
}

__global__ void mean_loss_kernel(const float* row_stats, std::int64_t rows, float* stats) {
  __shared__ double shared[kThreads / 32];
  double loss = 0;
  double correct = 0;
  for (std::int64_t r = threadIdx.x; r < rows; r += kThreads) {
    loss += row_stats[2 * r];
    correct += row_stats[2 * r + 1];
  }
  loss = block_sum(loss, shared);
  correct = block_sum(correct, shared);
  if (threadIdx.x == 0) {
    stats[0] = rows > 0 ? static_cast<float>(loss / static_cast<double>(rows)) : 0.0f;
    stats[1] = static_cast<float>(correct);
  }
}

}  // namespace

// ---- the launchers

void relu_forward(DType dtype, const void* x, void* y, std::int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    relu_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
  });
  check_launch();
}

void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    relu_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(y), static_cast<const T*>(dy),
                                                                    static_cast<T*>(dx), n);
  });
  check_launch();
}

void add(DType dtype, const void* a, const void* b, void* y, std::int64_t n, Stream stream) {
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                          static_cast<T*>(y), n);
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

void sgd_update(float* param, const float* grad, float* momentum_buffer, std::int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, float grad_scale, Stream stream) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, momentum_buffer, n, lr, momentum, weight_decay,
                                                     nesterov, grad_scale);
  check_launch();
}

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

void batch_norm_forward_training(DType dtype, const void* x, const float* gamma, const float* beta, float* running_mean,
                                 float* running_var, double momentum, double eps, void* y, float* saved_mean,
                                 float* saved_invstd, ImageDims dims, Stream stream) {
  if (dims.c == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bn_training_kernel<T><<<static_cast<unsigned>(dims.c), kThreads, 0, stream>>>(
        static_cast<const T*>(x), gamma, beta, running_mean, running_var, momentum, eps, static_cast<T*>(y), saved_mean,
        saved_invstd, dims);
  });
  check_launch();
}

void batch_norm_forward_inference(DType dtype, const void* x, const float* gamma, const float* beta,
                                  const float* running_mean, const float* running_var, double eps, void* y,
                                  ImageDims dims, Stream stream) {
  const std::int64_t n = dims.n * dims.c * dims.h * dims.w;
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bn_inference_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), gamma, beta, running_mean,
                                                                   running_var, eps, static_cast<T*>(y), dims);
  });
  check_launch();
}

void batch_norm_backward(DType dtype, const void* x, const void* dy, const float* gamma, const float* saved_mean,
                         const float* saved_invstd, void* dx, float* dgamma, float* dbeta, ImageDims dims,
                         Stream stream) {
  if (dims.c == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    bn_backward_kernel<T><<<static_cast<unsigned>(dims.c), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(dy), gamma, saved_mean, saved_invstd, static_cast<T*>(dx),
        dgamma, dbeta, dims);
  });
  check_launch();
}

void max_pool2d_forward(DType dtype, PoolWindow g, const void* x, ImageDims in, void* y, ImageDims out, Stream stream) {
  const std::int64_t n = out.n * out.c * out.h * out.w;
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_forward_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream>>>(g, static_cast<const T*>(x), in, static_cast<T*>(y), out);
  });
  check_launch();
}

void max_pool2d_backward(DType dtype, PoolWindow g, const void* x, ImageDims in, const void* dy, ImageDims out,
                         void* dx, Stream stream) {
  const std::int64_t n = in.n * in.c * in.h * in.w;
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_pool_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
        g, static_cast<const T*>(x), in, static_cast<const T*>(dy), out, static_cast<T*>(dx));
  });
  check_launch();
}

void global_avg_pool_forward(DType dtype, const void* x, ImageDims in, void* y, Stream stream) {
  const std::int64_t planes = in.n * in.c;
  if (planes == 0) return;
  const auto blocks = static_cast<unsigned>((planes * 32 + kThreads - 1) / kThreads);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    global_avg_pool_forward_kernel<T>
        <<<blocks, kThreads, 0, stream>>>(static_cast<const T*>(x), in, static_cast<T*>(y));
  });
  check_launch();
}

void global_avg_pool_backward(DType dtype, const void* dy, void* dx, ImageDims in, Stream stream) {
  const std::int64_t n = in.n * in.c * in.h * in.w;
  if (n == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    global_avg_pool_backward_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(dy), static_cast<T*>(dx), in);
  });
  check_launch();
}

void softmax_cross_entropy(DType dtype, const void* logits, const std::int32_t* labels, std::int64_t rows,
                           std::int64_t classes, float smoothing, float grad_scale, float* row_stats, float* stats,
                           void* dlogits, Stream stream) {
  const float gradient_scale = rows > 0 ? grad_scale / static_cast<float>(rows) : 0.0f;
  if (rows > 0) {
    dispatch(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      softmax_cross_entropy_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
          static_cast<const T*>(logits), labels, classes, smoothing, gradient_scale, row_stats,
          static_cast<T*>(dlogits));
    });
    check_launch();
  }
  mean_loss_kernel<<<1, kThreads, 0, stream>>>(row_stats, rows, stats);
  check_launch();
}

}  // namespace stoke::nn::cuda
