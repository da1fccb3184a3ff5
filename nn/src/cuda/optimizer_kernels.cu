// CudaBackend's optimizer kernels (kernels.hpp; the formulas are SgdStep's and AdamWStep's in
// backend.hpp): one grid-stride pass over a parameter's elements, in f32.
#include <cstdint>

#include "../adamw_update.hpp"
#include "kernel_utils.cuh"
#include "kernels.hpp"

namespace stoke::nn::cuda {
namespace {

__global__ void sgd_kernel(float* param, const float* grad, float* buffer, std::int64_t n, float lr, float momentum,
                           float weight_decay, bool nesterov, float grad_scale, const float* loss_scale) {
  if (loss_scale != nullptr) {
    if (loss_scale[kLossScaleFoundInf] != 0) return;  // an overflowed step changes nothing
    grad_scale /= loss_scale[kLossScaleScale];
  }
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

__global__ void adamw_kernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                             adamw::Scalars s) {
  STOKE_GRID_LOOP(i, n) adamw::update(param[i], grad[i], exp_avg[i], exp_avg_sq[i], s);
}

}  // namespace

void sgd_update(float* param, const float* grad, float* momentum_buffer, std::int64_t n, float lr, float momentum,
                float weight_decay, bool nesterov, float grad_scale, const float* loss_scale, Stream stream) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, momentum_buffer, n, lr, momentum, weight_decay,
                                                     nesterov, grad_scale, loss_scale);
  check_launch();
}

void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                  const adamw::Scalars& scalars, Stream stream) {
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kThreads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, n, scalars);
  check_launch();
}

}  // namespace stoke::nn::cuda
