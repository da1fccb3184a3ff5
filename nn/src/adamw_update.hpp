// AdamW's update of one element (AdamWStep's formula, backend.hpp), shared by the CPU and CUDA
// backends so that both compute it in the same order: the step's scalars are worked out once on
// the host, in double, then every element is updated in f32 as torch.optim.AdamW's
// single-tensor loop does it. Usable from .cpp and .cu files (no CUDA or nn header needed).
#pragma once

#include <cmath>

#include "host_device.hpp"

namespace stoke::nn {
struct AdamWStep;
}  // namespace stoke::nn

namespace stoke::nn::adamw {

/// The scalars of one step, as the elements use them.
struct Scalars {
  float grad_scale;
  float decay_factor;  ///< 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;              ///< lr / (1 - beta1^t)
  float bias_correction2_sqrt;  ///< sqrt(1 - beta2^t)
  float eps;
};

/// The scalars of `step`: the hyper-parameters' combinations in double, rounded once to f32 (as
/// PyTorch's Python floats are when they meet f32 tensors). Host code (adamw.cpp).
Scalars scalars(const AdamWStep& step);

/// Updates one element: torch's param.mul_(decay), exp_avg.mul_(b1).add_(g, alpha=1-b1),
/// exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2), param.addcdiv_(exp_avg, denom, -step_size).
STOKE_NN_HOST_DEVICE inline void update(float& param, float grad, float& exp_avg, float& exp_avg_sq, const Scalars& s) {
  const float g = grad * s.grad_scale;
  const float p = param * s.decay_factor;
  const float m = s.beta1 * exp_avg + s.one_minus_beta1 * g;
  const float v = s.beta2 * exp_avg_sq + s.one_minus_beta2 * g * g;
  const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
  exp_avg = m;
  exp_avg_sq = v;
  param = p + -s.step_size * m / denom;
}

}  // namespace stoke::nn::adamw
