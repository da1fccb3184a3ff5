// CudaBackend's batch normalisation kernels (kernels.hpp). Channels-first (NCHW, where cuDNN has
// no kernel): one block per channel for the statistics and the gradients, summed in double as
// the CPU reference sums them; a grid-stride loop for inference. Channels-last (NHWC): a grid of
// (channel group, row group) blocks whose partial sums in double are added up per channel in a
// fixed order, then one pass that normalises 16 bytes at a time. Deterministic either way: no
// floating-point atomics.
//
// Why not cuDNN's for channels-last: on the first GPU run (H200, ResNet-50, batch 256, bf16) its
// channels-last training kernels took 637 ms of a 673 ms step, the one-block-per-channel kernels
// here 258 of 340; PyTorch runs its own kernels for channels-last batch norm too.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernel_utils.cuh"
#include "kernels.hpp"

namespace stoke::nn::cuda {
namespace {

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

// ---- channels-last: x is `rows` (N H W) rows of `channels` values

constexpr int kBnLanes = 32;  // threads across channels: a warp reads 32 neighbouring values of a row
constexpr int kBnRows = 16;   // threads across rows
constexpr std::int64_t kBnTargetBlocks = 1024;  // enough to fill any current GPU several times

struct BnGrid {
  unsigned channel_groups;
  unsigned row_groups;
};
BnGrid bn_grid(ImageDims d) {
  const std::int64_t rows = d.n * d.h * d.w;
  const std::int64_t groups = (d.c + kBnLanes - 1) / kBnLanes;
  const std::int64_t row_groups =
      std::clamp<std::int64_t>((kBnTargetBlocks + groups - 1) / groups, 1, (rows + kBnRows - 1) / kBnRows);
  return {static_cast<unsigned>(groups), static_cast<unsigned>(std::max<std::int64_t>(row_groups, 1))};
}

// The workspace: partial sums double [row_groups][2][C], then four float [C] per-channel terms.
struct BnWorkspace {
  double* partial;
  float* terms;
  int row_groups;
};
BnWorkspace bn_workspace(void* workspace, ImageDims d) {
  const BnGrid grid = bn_grid(d);
  auto* partial = static_cast<double*>(workspace);
  return {partial, reinterpret_cast<float*>(partial + std::int64_t{grid.row_groups} * 2 * d.c),
          static_cast<int>(grid.row_groups)};
}

// For each channel, two sums over this block's rows: of x and x^2 (Stats), or of dy and
// dy (x - mean) (Gradients), into partial[row_group][0 or 1][c].
struct Stats {
  const float* mean;  // unused
  __device__ void add(float x, float /*dy*/, std::int64_t /*c*/, double& a, double& b) const {
    a += x;
    b += static_cast<double>(x) * x;
  }
};
struct Gradients {
  const float* mean;
  __device__ void add(float x, float dy, std::int64_t c, double& a, double& b) const {
    a += dy;
    b += static_cast<double>(dy) * (static_cast<double>(x) - mean[c]);
  }
};

template <class T, class Sums>
__global__ void bn_nhwc_sums_kernel(Sums sums, const T* x, const T* dy, std::int64_t rows, std::int64_t channels,
                                    double* partial) {
  __shared__ double shared_a[kBnRows][kBnLanes + 1];
  __shared__ double shared_b[kBnRows][kBnLanes + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kBnLanes + threadIdx.x;
  double a = 0;
  double b = 0;
  if (c < channels) {
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.y) * kBnRows;
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * kBnRows + threadIdx.y; r < rows; r += stride) {
      const std::int64_t at = r * channels + c;
      sums.add(load(x, at), dy != nullptr ? load(dy, at) : 0.0f, c, a, b);
    }
  }
  shared_a[threadIdx.y][threadIdx.x] = a;
  shared_b[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    for (int k = 1; k < kBnRows; ++k) {
      a += shared_a[k][threadIdx.x];
      b += shared_b[k][threadIdx.x];
    }
    partial[(static_cast<std::int64_t>(blockIdx.y) * 2) * channels + c] = a;
    partial[(static_cast<std::int64_t>(blockIdx.y) * 2 + 1) * channels + c] = b;
  }
}

// Adds a channel's partial sums in row-group order.
__device__ inline void total(const double* partial, int row_groups, std::int64_t channels, std::int64_t c, double& a,
                             double& b) {
  a = 0;
  b = 0;
  for (int g = 0; g < row_groups; ++g) {
    a += partial[(static_cast<std::int64_t>(g) * 2) * channels + c];
    b += partial[(static_cast<std::int64_t>(g) * 2 + 1) * channels + c];
  }
}

// terms: mean, gamma * invstd, beta (y = (x - mean) * scale + beta).
__global__ void bn_nhwc_finish_forward_kernel(const double* partial, int row_groups, std::int64_t rows,
                                              std::int64_t channels, const float* gamma, const float* beta,
                                              float* running_mean, float* running_var, double momentum, double eps,
                                              float* saved_mean, float* saved_invstd, float* terms) {
  STOKE_GRID_LOOP(c, channels) {
    double sum = 0;
    double squares = 0;
    total(partial, row_groups, channels, c, sum, squares);
    const auto m = static_cast<double>(rows);
    const double mean = sum / m;
    const double variance = fmax(squares / m - mean * mean, 0.0);
    const double invstd = 1.0 / sqrt(variance + eps);
    saved_mean[c] = static_cast<float>(mean);
    saved_invstd[c] = static_cast<float>(invstd);
    // PyTorch normalises with the biased variance but keeps the unbiased one as running_var.
    const double unbiased = variance * m / (m - 1);
    running_mean[c] = static_cast<float>((1 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
    running_var[c] = static_cast<float>((1 - momentum) * static_cast<double>(running_var[c]) + momentum * unbiased);
    terms[c] = static_cast<float>(mean);
    terms[channels + c] = static_cast<float>(static_cast<double>(gamma[c]) * invstd);
    terms[2 * channels + c] = beta[c];
  }
}

// dgamma += sum dy xhat, dbeta += sum dy; terms for dx = k1 (dy - mean_dy - (x - mean) k3):
// mean, k1 = gamma invstd, mean_dy, k3 = invstd mean(dy xhat).
__global__ void bn_nhwc_finish_backward_kernel(const double* partial, int row_groups, std::int64_t rows,
                                               std::int64_t channels, const float* gamma, const float* saved_mean,
                                               const float* saved_invstd, float* dgamma, float* dbeta, float* terms) {
  STOKE_GRID_LOOP(c, channels) {
    double sum_dy = 0;
    double sum_dy_centered = 0;
    total(partial, row_groups, channels, c, sum_dy, sum_dy_centered);
    const double invstd = saved_invstd[c];
    const double sum_dy_xhat = sum_dy_centered * invstd;
    if (dgamma != nullptr) dgamma[c] = static_cast<float>(static_cast<double>(dgamma[c]) + sum_dy_xhat);
    if (dbeta != nullptr) dbeta[c] = static_cast<float>(static_cast<double>(dbeta[c]) + sum_dy);
    const auto m = static_cast<double>(rows);
    terms[c] = saved_mean[c];
    terms[channels + c] = static_cast<float>(static_cast<double>(gamma[c]) * invstd);
    terms[2 * channels + c] = static_cast<float>(sum_dy / m);
    terms[3 * channels + c] = static_cast<float>(invstd * sum_dy_xhat / m);
  }
}

// out = f(x, dy, channel terms), 16 bytes at a time when C is a multiple of the pack (so a pack
// never crosses a row) and the pointers are aligned; one by one otherwise and for the rest.
struct Normalize {
  __device__ float operator()(float x, float /*dy*/, const float* t, std::int64_t c, std::int64_t C) const {
    return (x - t[c]) * t[C + c] + t[2 * C + c];
  }
};
struct InputGradient {
  __device__ float operator()(float x, float dy, const float* t, std::int64_t c, std::int64_t C) const {
    return t[C + c] * (dy - t[2 * C + c] - (x - t[c]) * t[3 * C + c]);
  }
};

template <class T, class F, bool Packed>
__global__ void bn_nhwc_map_kernel(F f, const T* x, const T* dy, const float* terms, T* out, std::int64_t n,
                                   std::int64_t channels) {
  constexpr int P = kPack<T>;
  const std::int64_t packs = Packed ? n / P : 0;
  if constexpr (Packed) {
    STOKE_GRID_LOOP(i, packs) {
      const Pack<T> px = reinterpret_cast<const Pack<T>*>(x)[i];
      Pack<T> pd{};
      if (dy != nullptr) pd = reinterpret_cast<const Pack<T>*>(dy)[i];
      const std::int64_t c0 = (i * P) % channels;
      Pack<T> po;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        store(po.v, k, f(load(px.v, k), dy != nullptr ? load(pd.v, k) : 0.0f, terms, c0 + k, channels));
      }
      reinterpret_cast<Pack<T>*>(out)[i] = po;
    }
  }
  STOKE_GRID_LOOP(i, n - packs * P) {
    const std::int64_t j = packs * P + i;
    store(out, j, f(load(x, j), dy != nullptr ? load(dy, j) : 0.0f, terms, j % channels, channels));
  }
}

template <class T, class F>
void launch_bn_nhwc_map(F f, const T* x, const T* dy, const float* terms, T* out, std::int64_t n,
                        std::int64_t channels, Stream stream) {
  if (channels % kPack<T> == 0 && aligned16(x) && aligned16(out) && (dy == nullptr || aligned16(dy))) {
    bn_nhwc_map_kernel<T, F, true><<<blocks_for(n / kPack<T>), kThreads, 0, stream>>>(f, x, dy, terms, out, n, channels);
  } else {
    bn_nhwc_map_kernel<T, F, false><<<blocks_for(n), kThreads, 0, stream>>>(f, x, dy, terms, out, n, channels);
  }
}

template <class T, class Sums>
void launch_bn_nhwc_sums(Sums sums, const T* x, const T* dy, ImageDims d, double* partial, Stream stream) {
  const BnGrid grid = bn_grid(d);
  bn_nhwc_sums_kernel<T><<<dim3(grid.channel_groups, grid.row_groups), dim3(kBnLanes, kBnRows), 0, stream>>>(
      sums, x, dy, d.n * d.h * d.w, d.c, partial);
}

}  // namespace

std::size_t batch_norm_nhwc_workspace_bytes(ImageDims dims) {
  const BnGrid grid = bn_grid(dims);
  return static_cast<std::size_t>(std::int64_t{grid.row_groups} * 2 * dims.c) * sizeof(double) +
         static_cast<std::size_t>(4 * dims.c) * sizeof(float);
}

void batch_norm_nhwc_forward_training(DType dtype, const void* x, const float* gamma, const float* beta,
                                      float* running_mean, float* running_var, double momentum, double eps, void* y,
                                      float* saved_mean, float* saved_invstd, ImageDims dims, void* workspace,
                                      Stream stream) {
  const std::int64_t rows = dims.n * dims.h * dims.w;
  if (dims.c == 0 || rows == 0) return;
  const BnWorkspace w = bn_workspace(workspace, dims);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_bn_nhwc_sums(Stats{nullptr}, static_cast<const T*>(x), static_cast<const T*>(nullptr), dims, w.partial,
                        stream);
    bn_nhwc_finish_forward_kernel<<<blocks_for(dims.c), kThreads, 0, stream>>>(
        w.partial, w.row_groups, rows, dims.c, gamma, beta, running_mean, running_var, momentum, eps, saved_mean,
        saved_invstd, w.terms);
    launch_bn_nhwc_map(Normalize{}, static_cast<const T*>(x), static_cast<const T*>(nullptr), w.terms,
                       static_cast<T*>(y), rows * dims.c, dims.c, stream);
  });
  check_launch();
}

void batch_norm_nhwc_backward(DType dtype, const void* x, const void* dy, const float* gamma, const float* saved_mean,
                              const float* saved_invstd, void* dx, float* dgamma, float* dbeta, ImageDims dims,
                              void* workspace, Stream stream) {
  const std::int64_t rows = dims.n * dims.h * dims.w;
  if (dims.c == 0 || rows == 0) return;
  const BnWorkspace w = bn_workspace(workspace, dims);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_bn_nhwc_sums(Gradients{saved_mean}, static_cast<const T*>(x), static_cast<const T*>(dy), dims, w.partial,
                        stream);
    bn_nhwc_finish_backward_kernel<<<blocks_for(dims.c), kThreads, 0, stream>>>(
        w.partial, w.row_groups, rows, dims.c, gamma, saved_mean, saved_invstd, dgamma, dbeta, w.terms);
    if (dx != nullptr) {
      launch_bn_nhwc_map(InputGradient{}, static_cast<const T*>(x), static_cast<const T*>(dy), w.terms,
                         static_cast<T*>(dx), rows * dims.c, dims.c, stream);
    }
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

}  // namespace stoke::nn::cuda
