// CudaBackend's optimizer updates: argument checks, then optimizer_kernels.cu.
#include <stdexcept>
#include <string>
#include <utility>

#include "../adamw_update.hpp"
#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"

namespace stoke::nn::cuda {

void CudaBackend::sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                             const SgdStep& step) {
  constexpr const char* kernel = "sgd_update";
  require_f32(param, device_, kernel, "param");
  require_f32(grad, device_, kernel, "grad");
  require_count(grad, param.numel(), kernel, "grad");
  const bool with_momentum = step.momentum != 0;
  if (with_momentum) {
    require_f32(momentum_buffer, device_, kernel, "momentum_buffer");
    require_count(momentum_buffer, param.numel(), kernel, "momentum_buffer");
  }
  if (step.loss_scale.defined()) {
    require_f32(step.loss_scale, device_, kernel, "loss_scale");
    require_count(step.loss_scale, LossScaleState::size, kernel, "loss_scale");
  }
  const DeviceGuard guard(device_);
  cuda::sgd_update(param.data_as<float>(), grad.data_as<const float>(),
                   with_momentum ? momentum_buffer.data_as<float>() : nullptr, param.numel(), step.lr, step.momentum,
                   step.weight_decay, step.nesterov, step.grad_scale,
                   step.loss_scale.defined() ? step.loss_scale.data_as<const float>() : nullptr, native(stream_));
}

void CudaBackend::adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                               const AdamWStep& step) {
  constexpr const char* kernel = "adamw_update";
  require_f32(param, device_, kernel, "param");
  require_f32(grad, device_, kernel, "grad");
  require_f32(exp_avg, device_, kernel, "exp_avg");
  require_f32(exp_avg_sq, device_, kernel, "exp_avg_sq");
  require_count(grad, param.numel(), kernel, "grad");
  require_count(exp_avg, param.numel(), kernel, "exp_avg");
  require_count(exp_avg_sq, param.numel(), kernel, "exp_avg_sq");
  if (step.step < 1) {
    throw std::invalid_argument("CudaBackend::adamw_update: step " + std::to_string(step.step) +
                                " is not a step number (they count from 1)");
  }
  const DeviceGuard guard(device_);
  cuda::adamw_update(param.data_as<float>(), grad.data_as<const float>(), exp_avg.data_as<float>(),
                     exp_avg_sq.data_as<float>(), param.numel(), adamw::scalars(step), native(stream_));
}

}  // namespace stoke::nn::cuda
