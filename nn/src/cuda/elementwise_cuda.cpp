// CudaBackend's elementwise kernels and precision helpers -- relu, add, dropout, cast, scale,
// all_finite, the fp16 loss scaler's state -- as CpuBackend's elementwise_cpu.cpp: argument checks,
// then elementwise_kernels.cu.
#include <cuda_runtime_api.h>

#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "../dropout_mask.hpp"
#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"
#include "stoke/base/random.hpp"

namespace stoke::nn::cuda {
namespace {

// The CPU's dropout uses base::mix64; the device's copy of it must be the same function.
static_assert(dropout::mix64(0) == base::mix64(0) && dropout::mix64(12345) == base::mix64(12345) &&
                  dropout::mix64(~0ULL) == base::mix64(~0ULL),
              "dropout::mix64 must equal stoke::base::mix64");

void require_probability(float p, const char* kernel) {
  if (!(p >= 0 && p < 1)) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": p = " + std::to_string(p) +
                                " is outside [0, 1)");
  }
}

}  // namespace

void CudaBackend::relu_forward(const Tensor& x, const Tensor& y) {
  require_float(x, device_, "relu_forward", "x");
  require_float(y, device_, "relu_forward", "y", &x);
  require_count(y, x.numel(), "relu_forward", "y");
  require_layout(y, x, "relu_forward", "y");
  const DeviceGuard guard(device_);
  cuda::relu_forward(x.dtype(), x.data(), y.data(), x.numel(), native(stream_));
}

void CudaBackend::relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) {
  require_float(y, device_, "relu_backward", "y");
  require_float(dy, device_, "relu_backward", "dy", &y);
  require_float(dx, device_, "relu_backward", "dx", &y);
  require_count(dy, y.numel(), "relu_backward", "dy");
  require_count(dx, y.numel(), "relu_backward", "dx");
  require_layout(dy, y, "relu_backward", "dy");
  require_layout(dx, y, "relu_backward", "dx");
  const DeviceGuard guard(device_);
  cuda::relu_backward(y.dtype(), y.data(), dy.data(), dx.data(), y.numel(), native(stream_));
}

void CudaBackend::add(const Tensor& a, const Tensor& b, const Tensor& y) {
  require_float(a, device_, "add", "a");
  require_float(b, device_, "add", "b", &a);
  require_float(y, device_, "add", "y", &a);
  require_count(b, a.numel(), "add", "b");
  require_count(y, a.numel(), "add", "y");
  require_layout(b, a, "add", "b");
  require_layout(y, a, "add", "y");
  const DeviceGuard guard(device_);
  cuda::add(a.dtype(), a.data(), b.data(), y.data(), a.numel(), native(stream_));
}

void CudaBackend::dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask, const Tensor& y) {
  require_float(x, device_, "dropout_forward", "x");
  require_float(y, device_, "dropout_forward", "y", &x);
  require_on(mask, device_, "dropout_forward", "mask");
  if (mask.dtype() != DType::u8) {
    throw std::invalid_argument("CudaBackend::dropout_forward: the mask is " + mask.describe() + "; expected u8");
  }
  require_count(mask, x.numel(), "dropout_forward", "mask");
  require_count(y, x.numel(), "dropout_forward", "y");
  require_layout(y, x, "dropout_forward", "y");
  require_probability(p, "dropout_forward");
  const DeviceGuard guard(device_);
  cuda::dropout_forward(x.dtype(), x.data(), mask.data_as<std::uint8_t>(), y.data(), x.numel(), seed,
                        dropout::threshold(p), 1.0f / (1.0f - p), native(stream_));
}

void CudaBackend::dropout_backward(const Tensor& dy, const Tensor& mask, float p, const Tensor& dx) {
  require_float(dy, device_, "dropout_backward", "dy");
  require_float(dx, device_, "dropout_backward", "dx", &dy);
  require_on(mask, device_, "dropout_backward", "mask");
  if (mask.dtype() != DType::u8) {
    throw std::invalid_argument("CudaBackend::dropout_backward: the mask is " + mask.describe() + "; expected u8");
  }
  require_count(mask, dy.numel(), "dropout_backward", "mask");
  require_count(dx, dy.numel(), "dropout_backward", "dx");
  require_probability(p, "dropout_backward");
  const DeviceGuard guard(device_);
  cuda::dropout_backward(dy.dtype(), dy.data(), mask.data_as<const std::uint8_t>(), dx.data(), dy.numel(),
                         1.0f / (1.0f - p), native(stream_));
}

void CudaBackend::cast(const Tensor& src, const Tensor& dst) {
  require_float(src, device_, "cast", "src");
  require_float(dst, device_, "cast", "dst");
  require_count(dst, src.numel(), "cast", "dst");
  // Elements are converted in memory order, which means the same thing only in the same layout.
  if (src.rank() == 4 && dst.rank() == 4 && src.layout() != dst.layout()) {
    throw std::invalid_argument("CudaBackend::cast: " + src.describe() + " to " + dst.describe() +
                                " changes the layout; cast converts the element type only");
  }
  const DeviceGuard guard(device_);
  if (src.dtype() == dst.dtype()) {
    if (src.data() != dst.data() && src.bytes() > 0) {
      STOKE_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice, native(stream_)));
    }
    return;
  }
  cuda::cast(src.dtype(), src.data(), dst.dtype(), dst.data(), src.numel(), native(stream_));
}

bool CudaBackend::all_finite(const Tensor& x) { return all_finite_in(std::span<const Tensor>(&x, 1)); }

bool CudaBackend::all_finite_in(std::span<const Tensor> xs) {
  for (const Tensor& x : xs) require_float(x, device_, "all_finite", "x");
  const DeviceGuard guard(device_);
  // One counter for all the tensors and one wait: a ResNet-50 has 161 gradients to check a step.
  auto* count = finite_count_.as<unsigned>();
  STOKE_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(unsigned), native(stream_)));
  for (const Tensor& x : xs) cuda::count_non_finite(x.dtype(), x.data(), x.numel(), count, native(stream_));
  unsigned bad = 0;
  STOKE_CUDA_CHECK(cudaMemcpyAsync(&bad, count, sizeof(unsigned), cudaMemcpyDeviceToHost, native(stream_)));
  stream_.synchronize();
  return bad == 0;
}

void CudaBackend::scale(const Tensor& x, float alpha) {
  require_float(x, device_, "scale", "x");
  const DeviceGuard guard(device_);
  cuda::scale(x.dtype(), x.data(), alpha, x.numel(), native(stream_));
}

// ---- the fp16 loss scaler: everything on the stream, no wait

static_assert(kLossScaleScale == LossScaleState::scale && kLossScaleGoodSteps == LossScaleState::good_steps &&
              kLossScaleSkipped == LossScaleState::skipped && kLossScaleFoundInf == LossScaleState::found_inf &&
              LossScaleState::size == 4);

namespace {
void require_loss_scale_state(const Tensor& state, Device device, const char* kernel) {
  require_f32(state, device, kernel, "state");
  require_count(state, LossScaleState::size, kernel, "state");
}
}  // namespace

void CudaBackend::multiply_by_loss_scale(const Tensor& x, const Tensor& state) {
  constexpr const char* kernel = "multiply_by_loss_scale";
  require_f32(x, device_, kernel, "x");
  require_loss_scale_state(state, device_, kernel);
  const DeviceGuard guard(device_);
  cuda::multiply_by_loss_scale(x.data_as<float>(), x.numel(), state.data_as<const float>(), native(stream_));
}

void CudaBackend::find_non_finite(std::span<const Tensor> xs, const Tensor& state) {
  constexpr const char* kernel = "find_non_finite";
  for (const Tensor& x : xs) require_float(x, device_, kernel, "x");
  require_loss_scale_state(state, device_, kernel);
  const DeviceGuard guard(device_);
  float* flag = state.data_as<float>() + LossScaleState::found_inf;
  STOKE_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(float), native(stream_)));  // 0.0f is all zero bits
  for (const Tensor& x : xs) {
    cuda::flag_non_finite(x.dtype(), x.data(), x.numel(), state.data_as<float>(), native(stream_));
  }
}

void CudaBackend::update_loss_scale(const Tensor& state, float growth, float backoff, int growth_interval) {
  require_loss_scale_state(state, device_, "update_loss_scale");
  const DeviceGuard guard(device_);
  cuda::update_loss_scale(state.data_as<float>(), growth, backoff, growth_interval, native(stream_));
}

}  // namespace stoke::nn::cuda
