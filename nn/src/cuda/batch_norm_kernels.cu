// CudaBackend's batch normalisation kernels (kernels.hpp). Channels-first (NCHW, where cuDNN has
// no kernel): one block per channel for the statistics and the gradients, summed in double as
// the CPU reference sums them; a grid-stride loop for inference. Channels-last (NHWC): a grid of
// (channel group, row group) blocks, each thread reading 16 bytes of a row at a time, whose partial
// sums in double are added up per channel in a fixed order, then one pass that normalises 16
// bytes at a time. Deterministic either way: no
// floating-point atomics. The channels-last kernels also fuse what follows batch norm in ResNet's
// blocks: forward adds a residual and applies ReLU in its normalising pass, backward masks dy by
// the forward's output as it reads it (both passes) and writes that masked dy for the residual.
//
// Why not cuDNN's for channels-last: on the first GPU run (H200, ResNet-50, batch 256, bf16) its
// channels-last training kernels took 637 ms of a 673 ms step, the one-block-per-channel kernels
// here 258 of 340; PyTorch runs its own kernels for channels-last batch norm too.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

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

// The sums pass: blocks of kBnThreads threads, `lanes` across a row's channels (a pack of P
// channels each: 16 bytes, or one value when P is 1) and kBnThreads / lanes across rows; a grid of
// (channel group, row group) blocks, about kBnTargetBlocks of them.
constexpr int kBnThreads = 256;
constexpr std::int64_t kBnTargetBlocks = 1024;  // enough to fill any current GPU several times

struct BnGrid {
  int pack;  // channels per thread: 1, or kPack<T> when rows split into aligned 16-byte packs
  unsigned lanes;
  unsigned rows_per_block;
  unsigned channel_groups;
  unsigned row_groups;
};
BnGrid bn_grid(ImageDims d, int pack) {
  const std::int64_t rows = d.n * d.h * d.w;
  const std::int64_t units = (d.c + pack - 1) / pack;  // packs (or values) per row
  const auto lanes = static_cast<unsigned>(std::clamp<std::int64_t>(units, 1, 32));
  const unsigned rows_per_block = kBnThreads / lanes;
  const std::int64_t groups = (units + lanes - 1) / lanes;
  const std::int64_t row_groups =
      std::clamp<std::int64_t>((kBnTargetBlocks + groups - 1) / groups, 1, (rows + rows_per_block - 1) / rows_per_block);
  return {pack, lanes, rows_per_block, static_cast<unsigned>(groups),
          static_cast<unsigned>(std::max<std::int64_t>(row_groups, 1))};
}
// Packs of 16 bytes when every row is whole packs and the tensors are aligned: a warp then reads
// 512 contiguous bytes, not 32 values of 2 bytes.
template <class T>
BnGrid bn_grid_for(ImageDims d, std::initializer_list<const void*> tensors) {
  const bool packed = d.c % kPack<T> == 0 && std::all_of(tensors.begin(), tensors.end(),
                                                         [](const void* t) { return t == nullptr || aligned16(t); });
  return bn_grid(d, packed ? kPack<T> : 1);
}

// The workspace: partial sums double [row_groups][2][C], then four float [C] per-channel terms.
struct BnWorkspace {
  double* partial;
  float* terms;
  int row_groups;
};
BnWorkspace bn_workspace(void* workspace, ImageDims d, const BnGrid& grid) {
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

// One row's P values of x (and dy) at pack `i` of the tensor: a 16-byte load each, or one value.
// With `relu_out` (the output of a forward that ended in ReLU), dy is masked as ReLU's backward
// masks it: 0 where that output is not positive. (Forward passes its residual as dy.)
template <class T, int P>
struct RowPart {
  float x[P];
  float dy[P];
  __device__ RowPart(const T* xs, const T* dys, const T* relu_out, std::int64_t i) {
    if constexpr (P == 1) {
      x[0] = load(xs, i);
      dy[0] = dys != nullptr ? load(dys, i) : 0.0f;
      if (relu_out != nullptr && !(load(relu_out, i) > 0.0f)) dy[0] = 0.0f;
    } else {
      const Pack<T> px = reinterpret_cast<const Pack<T>*>(xs)[i];
      Pack<T> pd{};
      Pack<T> py{};
      if (dys != nullptr) pd = reinterpret_cast<const Pack<T>*>(dys)[i];
      if (relu_out != nullptr) py = reinterpret_cast<const Pack<T>*>(relu_out)[i];
#pragma unroll
      for (int k = 0; k < P; ++k) {
        x[k] = load(px.v, k);
        dy[k] = dys != nullptr ? load(pd.v, k) : 0.0f;
        if (relu_out != nullptr && !(load(py.v, k) > 0.0f)) dy[k] = 0.0f;
      }
    }
  }
};

// Block (lanes x rows_per_block): thread (tx, ty) sums channels [(group * lanes + tx) * P, + P) over
// rows ty, ty + rows_per_block, ... of its row group; the block then adds its rows per channel in a
// fixed order. Shared memory: 2 x kBnThreads x P doubles.
template <class T, int P, class Sums>
__global__ void bn_nhwc_sums_kernel(Sums sums, const T* x, const T* dy, const T* relu_out, std::int64_t rows,
                                    std::int64_t channels, double* partial) {
  extern __shared__ double shared[];
  const std::int64_t units = channels / P;  // P == 1, or channels a multiple of P
  const std::int64_t unit = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  double a[P] = {};
  double b[P] = {};
  if (unit < units) {
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.y) * blockDim.y;
    for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += stride) {
      const RowPart<T, P> part(x, dy, relu_out, r * units + unit);
#pragma unroll
      for (int k = 0; k < P; ++k) sums.add(part.x[k], part.dy[k], unit * P + k, a[k], b[k]);
    }
  }
  const unsigned width = blockDim.x * P;  // channels of this block
  double* shared_a = shared;
  double* shared_b = shared + blockDim.y * width;
#pragma unroll
  for (int k = 0; k < P; ++k) {
    shared_a[threadIdx.y * width + threadIdx.x * P + k] = a[k];
    shared_b[threadIdx.y * width + threadIdx.x * P + k] = b[k];
  }
  __syncthreads();
  for (unsigned column = threadIdx.y * blockDim.x + threadIdx.x; column < width; column += blockDim.x * blockDim.y) {
    const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * width + column;
    if (c >= channels) continue;
    double total_a = 0;
    double total_b = 0;
    for (unsigned y = 0; y < blockDim.y; ++y) {
      total_a += shared_a[y * width + column];
      total_b += shared_b[y * width + column];
    }
    partial[(static_cast<std::int64_t>(blockIdx.y) * 2) * channels + c] = total_a;
    partial[(static_cast<std::int64_t>(blockIdx.y) * 2 + 1) * channels + c] = total_b;
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

// out = f(x, dy, its channel's terms) on the grid of the sums pass: a thread keeps to one pack of
// channels, so it loads their terms once and then streams rows, 16 bytes at a time (one value at a
// time on the scalar grid) -- no per-element channel index, no per-element loads of the terms.
// Forward's dy is the residual (0 without one).
struct Normalize {
  bool relu;
  __device__ float operator()(float x, float residual, float mean, float scale, float shift, float /*unused*/) const {
    const float y = (x - mean) * scale + shift + residual;
    return relu ? fmaxf(y, 0.0f) : y;
  }
};
struct MaskedGradient {  // the residual's gradient alone: dy as masked
  __device__ float operator()(float /*x*/, float dy, float, float, float, float) const { return dy; }
};
struct InputGradient {
  __device__ float operator()(float x, float dy, float mean, float k1, float mean_dy, float k3) const {
    return k1 * (dy - mean_dy - (x - mean) * k3);
  }
};

// With `dy_out`, the (masked) dy is written there too: the residual's gradient.
template <class T, int P, class F>
__global__ void bn_nhwc_map_kernel(F f, const T* x, const T* dy, const T* relu_out, const float* terms, T* out,
                                   T* dy_out, std::int64_t rows, std::int64_t channels, int term_count) {
  const std::int64_t units = channels / P;
  const std::int64_t unit = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (unit >= units) return;
  float t[4][P];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int k = 0; k < P; ++k) t[j][k] = j < term_count ? terms[j * channels + unit * P + k] : 0.0f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.y) * blockDim.y;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += stride) {
    const std::int64_t i = r * units + unit;
    const RowPart<T, P> part(x, dy, relu_out, i);
    if constexpr (P == 1) {
      store(out, i, f(part.x[0], part.dy[0], t[0][0], t[1][0], t[2][0], t[3][0]));
      if (dy_out != nullptr) store(dy_out, i, part.dy[0]);
    } else {
      Pack<T> po;
#pragma unroll
      for (int k = 0; k < P; ++k) store(po.v, k, f(part.x[k], part.dy[k], t[0][k], t[1][k], t[2][k], t[3][k]));
      reinterpret_cast<Pack<T>*>(out)[i] = po;
      if (dy_out != nullptr) {
        Pack<T> pd;
#pragma unroll
        for (int k = 0; k < P; ++k) store(pd.v, k, part.dy[k]);
        reinterpret_cast<Pack<T>*>(dy_out)[i] = pd;
      }
    }
  }
}

// The tensors of one pass over the image: x, dy (forward: the residual), the ReLU output dy is
// masked by, the output and the masked dy's copy (each but x may be null).
template <class T>
struct BnOperands {
  const T* x;
  const T* dy;
  const T* relu_out;
  T* out;
  T* dy_out;
};

// The grid of a call: one for both passes, so that each thread's channels are the same in both.
template <class T>
BnGrid bn_grid_of(ImageDims d, const BnOperands<T>& o) {
  return bn_grid_for<T>(d, {o.x, o.dy, o.relu_out, o.out, o.dy_out});
}

template <class T, class F>
void launch_bn_nhwc_map(F f, const BnOperands<T>& o, const float* terms, int term_count, ImageDims d,
                        const BnGrid& grid, Stream stream) {
  const dim3 blocks(grid.channel_groups, grid.row_groups);
  const dim3 threads(grid.lanes, grid.rows_per_block);
  const std::int64_t rows = d.n * d.h * d.w;
  if (grid.pack == 1) {
    bn_nhwc_map_kernel<T, 1>
        <<<blocks, threads, 0, stream>>>(f, o.x, o.dy, o.relu_out, terms, o.out, o.dy_out, rows, d.c, term_count);
  } else {
    bn_nhwc_map_kernel<T, kPack<T>>
        <<<blocks, threads, 0, stream>>>(f, o.x, o.dy, o.relu_out, terms, o.out, o.dy_out, rows, d.c, term_count);
  }
}

template <class T, class Sums>
void launch_bn_nhwc_sums(Sums sums, const BnOperands<T>& o, ImageDims d, const BnGrid& grid, double* partial,
                         Stream stream) {
  const dim3 blocks(grid.channel_groups, grid.row_groups);
  const dim3 threads(grid.lanes, grid.rows_per_block);
  const std::size_t shared = 2 * std::size_t{kBnThreads} * static_cast<std::size_t>(grid.pack) * sizeof(double);
  const std::int64_t rows = d.n * d.h * d.w;
  if (grid.pack == 1) {
    bn_nhwc_sums_kernel<T, 1><<<blocks, threads, shared, stream>>>(sums, o.x, o.dy, o.relu_out, rows, d.c, partial);
  } else {
    bn_nhwc_sums_kernel<T, kPack<T>>
        <<<blocks, threads, shared, stream>>>(sums, o.x, o.dy, o.relu_out, rows, d.c, partial);
  }
}

}  // namespace

std::size_t batch_norm_nhwc_workspace_bytes(ImageDims dims) {
  // Enough for whichever grid the call takes (its dtype and alignment choose).
  unsigned row_groups = 0;
  for (const int pack : {1, 4, 8}) row_groups = std::max(row_groups, bn_grid(dims, pack).row_groups);
  return static_cast<std::size_t>(std::int64_t{row_groups} * 2 * dims.c) * sizeof(double) +
         static_cast<std::size_t>(4 * dims.c) * sizeof(float);
}

void batch_norm_nhwc_forward_training(DType dtype, const void* x, const float* gamma, const float* beta,
                                      float* running_mean, float* running_var, double momentum, double eps,
                                      BnEpilogue epilogue, void* y, float* saved_mean, float* saved_invstd,
                                      ImageDims dims, void* workspace, Stream stream) {
  const std::int64_t rows = dims.n * dims.h * dims.w;
  if (dims.c == 0 || rows == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const BnOperands<T> sums{static_cast<const T*>(x), nullptr, nullptr, nullptr, nullptr};
    const BnOperands<T> map{static_cast<const T*>(x), static_cast<const T*>(epilogue.residual), nullptr,
                            static_cast<T*>(y), nullptr};
    const BnGrid grid = bn_grid_of(dims, map);
    const BnWorkspace w = bn_workspace(workspace, dims, grid);
    launch_bn_nhwc_sums(Stats{nullptr}, sums, dims, grid, w.partial, stream);
    bn_nhwc_finish_forward_kernel<<<blocks_for(dims.c), kThreads, 0, stream>>>(
        w.partial, w.row_groups, rows, dims.c, gamma, beta, running_mean, running_var, momentum, eps, saved_mean,
        saved_invstd, w.terms);
    launch_bn_nhwc_map(Normalize{epilogue.relu}, map, w.terms, 3, dims, grid, stream);
  });
  check_launch();
}

void batch_norm_nhwc_backward(DType dtype, const void* x, const void* relu_out, const void* dy, const float* gamma,
                              const float* saved_mean, const float* saved_invstd, void* dx, void* dresidual,
                              float* dgamma, float* dbeta, ImageDims dims, void* workspace, Stream stream) {
  const std::int64_t rows = dims.n * dims.h * dims.w;
  if (dims.c == 0 || rows == 0) return;
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const BnOperands<T> o{static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<const T*>(relu_out),
                          static_cast<T*>(dx), static_cast<T*>(dresidual)};
    const BnGrid grid = bn_grid_of(dims, o);
    const BnWorkspace w = bn_workspace(workspace, dims, grid);
    launch_bn_nhwc_sums(Gradients{saved_mean}, o, dims, grid, w.partial, stream);
    bn_nhwc_finish_backward_kernel<<<blocks_for(dims.c), kThreads, 0, stream>>>(
        w.partial, w.row_groups, rows, dims.c, gamma, saved_mean, saved_invstd, dgamma, dbeta, w.terms);
    if (dx != nullptr) {
      launch_bn_nhwc_map(InputGradient{}, o, w.terms, 4, dims, grid, stream);
    } else if (dresidual != nullptr) {
      // No input gradient wanted, but the residual's: one pass that writes the masked dy alone.
      launch_bn_nhwc_map(MaskedGradient{}, BnOperands<T>{o.x, o.dy, o.relu_out, o.dy_out, nullptr}, w.terms, 4, dims,
                         grid, stream);
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
