// CudaBackend's optimizer updates: argument checks, then optimizer_kernels.cu.
#include <stdexcept>
#include <string>
#include <utility>

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
  const DeviceGuard guard(device_);
  cuda::sgd_update(param.data_as<float>(), grad.data_as<const float>(),
                   with_momentum ? momentum_buffer.data_as<float>() : nullptr, param.numel(), step.lr, step.momentum,
                   step.weight_decay, step.nesterov, step.grad_scale, native(stream_));
}

}  // namespace stoke::nn::cuda
