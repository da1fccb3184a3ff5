// The plain CUDA kernels of CudaBackend, behind host functions that take device pointers and
// enqueue one or two launches on `stream`. No CUDA header is needed to call them. Each family's
// kernels and launchers are in its own file, named in its section below (kernel_utils.cuh has
// what they share).
//
// Floating-point tensors are f32, bf16 or f16 (`dtype`); every kernel loads them as float,
// computes in float (double for per-channel and per-row sums) and rounds once when it stores.
// Images are indexed through ImageDims, which knows the layout: the kernels take NCHW and NHWC.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../adamw_update.hpp"
#include "stoke/nn/device.hpp"

struct CUstream_st;

namespace stoke::nn::cuda {

/// A 4-d image tensor's logical dims and memory layout. A matrix {rows, cols} whose channels are
/// its columns (a Linear's output) is {rows, cols, 1, 1} in either layout.
struct ImageDims {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  bool nhwc = false;
};

using Stream = CUstream_st*;

// ---- elementwise (elementwise_kernels.cu); n elements
void relu_forward(DType dtype, const void* x, void* y, std::int64_t n, Stream stream);
void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n, Stream stream);
void add(DType dtype, const void* a, const void* b, void* y, std::int64_t n, Stream stream);
void dropout_forward(DType dtype, const void* x, std::uint8_t* mask, void* y, std::int64_t n, std::uint64_t seed,
                     std::uint64_t threshold, float keep_scale, Stream stream);
void dropout_backward(DType dtype, const void* dy, const std::uint8_t* mask, void* dx, std::int64_t n, float keep_scale,
                      Stream stream);
void cast(DType from, const void* src, DType to, void* dst, std::int64_t n, Stream stream);
void scale(DType dtype, void* x, float alpha, std::int64_t n, Stream stream);
/// Adds the count of infinite and NaN elements to *bad (a device counter).
void count_non_finite(DType dtype, const void* x, std::int64_t n, unsigned* bad, Stream stream);

// ---- the fp16 loss scaler's state on the device (elementwise_kernels.cu): f32 {4}, indexed as
//      nn::LossScaleState (backend.hpp), whose indices these repeat for the kernels
constexpr int kLossScaleScale = 0;
constexpr int kLossScaleGoodSteps = 1;
constexpr int kLossScaleSkipped = 2;
constexpr int kLossScaleFoundInf = 3;
/// x (f32, n elements) *= state[scale].
void multiply_by_loss_scale(float* x, std::int64_t n, const float* state, Stream stream);
/// Sets state[found_inf] to 1 when an element of x is infinite or NaN (never clears it).
void flag_non_finite(DType dtype, const void* x, std::int64_t n, float* state, Stream stream);
/// PyTorch's _amp_update_scale_ on state (Backend::update_loss_scale), one thread.
void update_loss_scale(float* state, float growth, float backoff, int growth_interval, Stream stream);

// ---- optimizer (optimizer_kernels.cu); all f32, n elements
/// One SGD step (SgdStep's formula, backend.hpp); momentum_buffer null when momentum == 0;
/// loss_scale a loss scale state (SgdStep::loss_scale) or null.
void sgd_update(float* param, const float* grad, float* momentum_buffer, std::int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, float grad_scale, const float* loss_scale, Stream stream);
/// One AdamW step (AdamWStep's formula, backend.hpp), with the step's scalars (adamw::scalars).
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                  const adamw::Scalars& scalars, Stream stream);

// ---- per-channel bias of the convolution and Linear (bias_kernels.cu)
/// y[i] += b[channel of i] over the image y.
void add_channel_bias(DType dtype, void* y, const void* b, ImageDims dims, Stream stream);
/// db[c] += the sum of dy over N, H and W.
void accumulate_channel_sums(DType dtype, const void* dy, void* db, ImageDims dims, Stream stream);

// ---- batch normalisation (batch_norm_kernels.cu); gamma, beta and the statistics f32 {C}
void batch_norm_forward_training(DType dtype, const void* x, const float* gamma, const float* beta, float* running_mean,
                                 float* running_var, double momentum, double eps, void* y, float* saved_mean,
                                 float* saved_invstd, ImageDims dims, Stream stream);
void batch_norm_forward_inference(DType dtype, const void* x, const float* gamma, const float* beta,
                                  const float* running_mean, const float* running_var, double eps, void* y,
                                  ImageDims dims, Stream stream);
/// dx may be null; dgamma and dbeta (either may be null) accumulate.
void batch_norm_backward(DType dtype, const void* x, const void* dy, const float* gamma, const float* saved_mean,
                         const float* saved_invstd, void* dx, float* dgamma, float* dbeta, ImageDims dims,
                         Stream stream);
/// The channels-last versions (dims.nhwc): many blocks per channel, partial sums in double into
/// `workspace` (batch_norm_nhwc_workspace_bytes of it, any contents) added up in a fixed order,
/// then one 16-byte pass to normalise. The same results as the kernels above, but fast.
std::size_t batch_norm_nhwc_workspace_bytes(ImageDims dims);
/// What the normalising pass does after it: y = max(y + residual, 0) (residual null: no add; relu
/// false: no max), rounding once.
struct BnEpilogue {
  bool relu = false;
  const void* residual = nullptr;
};
void batch_norm_nhwc_forward_training(DType dtype, const void* x, const float* gamma, const float* beta,
                                      float* running_mean, float* running_var, double momentum, double eps,
                                      BnEpilogue epilogue, void* y, float* saved_mean, float* saved_invstd,
                                      ImageDims dims, void* workspace, Stream stream);
/// With relu_out (the output of a forward with a ReLU epilogue), the gradients of that forward: dy
/// is masked where relu_out is not positive as it is read, and dresidual (may be null) gets the
/// masked dy. dx may be null; dgamma and dbeta (either may be null) accumulate.
void batch_norm_nhwc_backward(DType dtype, const void* x, const void* relu_out, const void* dy, const float* gamma,
                              const float* saved_mean, const float* saved_invstd, void* dx, void* dresidual,
                              float* dgamma, float* dbeta, ImageDims dims, void* workspace, Stream stream);

// ---- pooling (pooling_kernels.cu)
struct PoolWindow {
  int kernel = 2, stride = 2, padding = 0;
};
void max_pool2d_forward(DType dtype, PoolWindow g, const void* x, ImageDims in, void* y, ImageDims out, Stream stream);
/// Writes every element of dx (no atomics: each input cell gathers from the windows it wins).
/// `winners` is scratch of one int32 per element of dy.
void max_pool2d_backward(DType dtype, PoolWindow g, const void* x, ImageDims in, const void* dy, ImageDims out,
                         std::int32_t* winners, void* dx, Stream stream);
/// y {N, C} (row-major) = the mean over H and W.
void global_avg_pool_forward(DType dtype, const void* x, ImageDims in, void* y, Stream stream);
void global_avg_pool_backward(DType dtype, const void* dy, void* dx, ImageDims in, Stream stream);

// ---- loss (loss_kernels.cu)
/// logits and dlogits (may be null) {rows, classes} of `dtype`; labels i32; row_stats f32
/// {rows, 2} scratch; stats f32 {2}. A label outside [0, classes) makes its row's loss NaN (and
/// its dlogits row NaN), so the mean loss is NaN: CudaBackend's report of a bad label.
void softmax_cross_entropy(DType dtype, const void* logits, const std::int32_t* labels, std::int64_t rows,
                           std::int64_t classes, float smoothing, float grad_scale, float* row_stats, float* stats,
                           void* dlogits, Stream stream);
/// logits and dlogits (may be null) {rows, classes} of `dtype`; targets f32 {rows, classes};
/// pos_weight f32 {classes} or null; row_stats f32 {rows, 2} scratch; stats f32 {2}
/// (Backend::binary_cross_entropy_with_logits says what they get).
void binary_cross_entropy_with_logits(DType dtype, const void* logits, const float* targets, const float* pos_weight,
                                      std::int64_t rows, std::int64_t classes, float grad_scale, float* row_stats,
                                      float* stats, void* dlogits, Stream stream);

}  // namespace stoke::nn::cuda
