// CudaBackend's batch normalisation kernels (kernels.hpp): one block per channel for the
// statistics and the gradients, summed in double as the CPU reference sums them (deterministic:
// no floating-point atomics); a grid-stride loop for inference.
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

}  // namespace

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
