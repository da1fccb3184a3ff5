#include "stoke/nn/backend.hpp"

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cpu/cpu_backend.hpp"
#if STOKE_HAS_CUDA
#include "cuda/cuda_backend.hpp"
#endif
#include "stoke/nn/device.hpp"

namespace stoke::nn {

Tensor Backend::zeros(Shape shape, DType dtype, TensorLayout layout) {
  Tensor t = empty(std::move(shape), dtype, layout);
  t.zero(stream());
  return t;
}

bool Backend::supports(DType dtype, TensorLayout layout) const noexcept {
  return dtype == DType::f32 && layout == TensorLayout::nchw;
}

TensorLayout Backend::preferred_layout(DType /*dtype*/) const noexcept { return TensorLayout::nchw; }

bool Backend::all_finite_in(std::span<const Tensor> xs) {
  for (const Tensor& x : xs) {
    if (!all_finite(x)) return false;
  }
  return true;
}

void Backend::batch_norm_relu_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                               const Tensor& running_mean, const Tensor& running_var, double momentum,
                                               double eps, const Tensor& residual, const Tensor& y,
                                               const Tensor& saved_mean, const Tensor& saved_invstd) {
  batch_norm_forward_training(x, gamma, beta, running_mean, running_var, momentum, eps, y, saved_mean, saved_invstd);
  if (residual.defined()) add(y, residual, y);
  relu_forward(y, y);
}

void Backend::batch_norm_relu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                                       const Tensor& saved_mean, const Tensor& saved_invstd, const Tensor& dx,
                                       const Tensor& dresidual, const Tensor& dgamma, const Tensor& dbeta) {
  const Tensor dz = dresidual.defined() ? dresidual : empty(dy.shape(), dy.dtype(), dy.layout());
  relu_backward(y, dy, dz);
  batch_norm_backward(x, dz, gamma, saved_mean, saved_invstd, dx, dgamma, dbeta);
}

namespace {

// The base's loss scaler works on a host copy of the state.
std::vector<float> read_state(const Tensor& state, StreamView stream) {
  if (state.dtype() != DType::f32 || state.numel() != LossScaleState::size) {
    throw std::invalid_argument("the loss scale state " + state.describe() + " is not f32 {" +
                                std::to_string(LossScaleState::size) + "}");
  }
  return state.to_vector(stream);
}

void write_state(const Tensor& state, const std::vector<float>& values, StreamView stream) {
  state.copy_from(Tensor::from_values({LossScaleState::size}, values), stream);
  stream.synchronize();  // the host copy goes when this returns
}

}  // namespace

void Backend::multiply_by_loss_scale(const Tensor& x, const Tensor& state) {
  scale(x, read_state(state, stream())[LossScaleState::scale]);
}

void Backend::find_non_finite(std::span<const Tensor> xs, const Tensor& state) {
  std::vector<float> values = read_state(state, stream());
  values[LossScaleState::found_inf] = all_finite_in(xs) ? 0.0f : 1.0f;
  write_state(state, values, stream());
}

void Backend::update_loss_scale(const Tensor& state, float growth, float backoff, int growth_interval) {
  std::vector<float> v = read_state(state, stream());
  if (v[LossScaleState::found_inf] != 0) {
    v[LossScaleState::scale] *= backoff;
    v[LossScaleState::good_steps] = 0;
    v[LossScaleState::skipped] += 1;
  } else if (++v[LossScaleState::good_steps] >= static_cast<float>(growth_interval)) {
    v[LossScaleState::scale] *= growth;
    v[LossScaleState::good_steps] = 0;
  }
  write_state(state, v, stream());
}

std::unique_ptr<Backend> make_backend(Device device, StreamView stream) {
  if (device.is_cpu()) return std::make_unique<CpuBackend>();
  if (stream.device() != device) {
    throw DeviceError("make_backend: the stream is on " + stream.device().str() + ", not on " + device.str());
  }
#if STOKE_HAS_CUDA
  return make_cuda_backend(device, stream);
#else
  throw DeviceError("make_backend(" + device.str() +
                    "): this build of stoke has no CUDA (configure with -DSTOKE_CUDA=ON); use Device::cpu()");
#endif
}

}  // namespace stoke::nn
