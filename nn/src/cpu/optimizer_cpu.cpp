// CpuBackend's optimizer kernel: one SGD step of one parameter, PyTorch's torch.optim.SGD with
// dampening 0 (the formula is SgdStep's, backend.hpp). The momentum buffer starts at zero, so
// the first step's buffer is the gradient itself, as PyTorch's first step makes it.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cpu_backend.hpp"

namespace stoke::nn {
namespace {

void require_count(const Tensor& t, std::int64_t count, const char* what) {
  if (t.numel() != count) {
    throw std::invalid_argument(std::string("CpuBackend::sgd_update: ") + what + " " + t.describe() + " has " +
                                std::to_string(t.numel()) + " elements, the parameter " + std::to_string(count));
  }
}

}  // namespace

void CpuBackend::sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                            const SgdStep& step) {
  require_cpu_f32(param, "sgd_update's param");
  require_cpu_f32(grad, "sgd_update's grad");
  require_count(grad, param.numel(), "the gradient");
  const bool with_momentum = step.momentum != 0;
  if (with_momentum) {
    require_cpu_f32(momentum_buffer, "sgd_update's momentum_buffer");
    require_count(momentum_buffer, param.numel(), "the momentum buffer");
  }
  float* p = param.data_as<float>();
  const float* d = grad.data_as<const float>();
  float* buffer = with_momentum ? momentum_buffer.data_as<float>() : nullptr;
  const SgdStep s = step;
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

}  // namespace stoke::nn
