// CpuBackend's optimizer kernels: one SGD step of one parameter, PyTorch's torch.optim.SGD with
// dampening 0 (the formula is SgdStep's, backend.hpp; the momentum buffer starts at zero, so the
// first step's buffer is the gradient itself, as PyTorch's first step makes it); and one AdamW
// step, torch.optim.AdamW (AdamWStep's formula, computed by adamw_update.hpp as on CUDA).
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../adamw_update.hpp"
#include "cpu_backend.hpp"

namespace stoke::nn {
namespace {

void require_count(const Tensor& t, std::int64_t count, const char* kernel, const char* what) {
  if (t.numel() != count) {
    throw std::invalid_argument(std::string("CpuBackend::") + kernel + ": " + what + " " + t.describe() + " has " +
                                std::to_string(t.numel()) + " elements, the parameter " + std::to_string(count));
  }
}

}  // namespace

void CpuBackend::sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                            const SgdStep& step) {
  require_cpu_f32_elements(param, "sgd_update's param");
  require_cpu_f32_elements(grad, "sgd_update's grad");
  require_count(grad, param.numel(), "sgd_update", "the gradient");
  require_one_layout({&param, &grad, &momentum_buffer}, "sgd_update");
  const bool with_momentum = step.momentum != 0;
  if (with_momentum) {
    require_cpu_f32_elements(momentum_buffer, "sgd_update's momentum_buffer");
    require_count(momentum_buffer, param.numel(), "sgd_update", "the momentum buffer");
  }
  SgdStep s = step;
  if (step.loss_scale.defined()) {
    require_cpu_f32_elements(step.loss_scale, "sgd_update's loss_scale");
    require_count(step.loss_scale, LossScaleState::size, "sgd_update", "the loss scale state");
    const float* state = step.loss_scale.data_as<const float>();
    if (state[LossScaleState::found_inf] != 0) return;  // an overflowed step changes nothing
    s.grad_scale = step.grad_scale / state[LossScaleState::scale];
  }
  float* p = param.data_as<float>();
  const float* d = grad.data_as<const float>();
  float* buffer = with_momentum ? momentum_buffer.data_as<float>() : nullptr;
  for_chunks(param.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const float g = d[i] * s.grad_scale + s.weight_decay * p[i];
      float update = g;
      if (buffer != nullptr) {
        buffer[i] = s.momentum * buffer[i] + g;
        update = s.nesterov ? g + s.momentum * buffer[i] : buffer[i];
      }
      p[i] -= s.lr * update;
    }
  });
}

void CpuBackend::adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                              const AdamWStep& step) {
  require_cpu_f32_elements(param, "adamw_update's param");
  require_cpu_f32_elements(grad, "adamw_update's grad");
  require_cpu_f32_elements(exp_avg, "adamw_update's exp_avg");
  require_cpu_f32_elements(exp_avg_sq, "adamw_update's exp_avg_sq");
  require_count(grad, param.numel(), "adamw_update", "the gradient");
  require_count(exp_avg, param.numel(), "adamw_update", "exp_avg");
  require_count(exp_avg_sq, param.numel(), "adamw_update", "exp_avg_sq");
  require_one_layout({&param, &grad, &exp_avg, &exp_avg_sq}, "adamw_update");
  if (step.step < 1) {
    throw std::invalid_argument("CpuBackend::adamw_update: step " + std::to_string(step.step) +
                                " is not a step number (they count from 1)");
  }
  float* p = param.data_as<float>();
  const float* d = grad.data_as<const float>();
  float* m = exp_avg.data_as<float>();
  float* v = exp_avg_sq.data_as<float>();
  const adamw::Scalars s = adamw::scalars(step);
  for_chunks(param.numel(), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) adamw::update(p[i], d[i], m[i], v[i], s);
  });
}

}  // namespace stoke::nn
