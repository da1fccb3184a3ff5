// CudaBackend's batch normalisation: argument checks, then for training cuDNN's kernels on
// channels-first (NCHW) inputs and batch_norm_kernels.cu's on channels-last (NHWC) ones, whose
// channels-last training kernels are slow (see there); batch_norm_kernels.cu's also for inference
// and wherever cuDNN answers CUDNN_STATUS_NOT_SUPPORTED. docs/benchmarks.md has the profiles.
#include <cudnn.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "cudnn_descriptors.hpp"
#include "kernels.hpp"
#include "stoke/gpu/error.hpp"

namespace stoke::nn::cuda {
namespace {

// Per channel over N, H and W (backward must use its forward's mode).
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

// cudnnBatchNormalizationBackward takes the forward's epsilon, but uses it only to recompute the
// statistics when none are saved; they always are here (the Backend API does not pass it down).
constexpr double kBackwardEpsilon = 1e-5;

// True when cuDNN ran the call; false when it has no kernel for these tensors, so that the caller
// runs its own; throws CudnnError naming the call for any other status.
bool cudnn_ran(cudnnStatus_t status, const char* call, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return true;
  if (status == CUDNN_STATUS_NOT_SUPPORTED) return false;
  gpu::detail::throw_cudnn_error(static_cast<int>(status), call, __FILE__, line);
}

// `t` is defined, on `device`, of x's float dtype, shape and layout.
void require_like_x(const Tensor& t, const Tensor& x, Device device, const char* kernel, const char* what) {
  require_float(t, device, kernel, what, &x);
  require_shape(t, x.shape(), kernel, what);
  require_layout(t, x, kernel, what);
}

// Training forward's per-channel tensors, in the Backend's order.
struct ChannelTensors {
  const Tensor& gamma;
  const Tensor& beta;
  const Tensor& running_mean;
  const Tensor& running_var;
  const Tensor& saved_mean;
  const Tensor& saved_invstd;
};

// Training's checks: x an image, y like it, the per-channel tensors f32 {C}, more than one value
// per channel. Returns x's dims.
ImageDims check_training_forward(const Tensor& x, const Tensor& y, const ChannelTensors& c, Device device,
                                 const char* kernel) {
  require_float(x, device, kernel, "x");
  const ImageDims dims = image_dims(x, kernel, "x");
  require_like_x(y, x, device, kernel, "y");
  const std::pair<const Tensor*, const char*> channel_tensors[] = {{&c.gamma, "gamma"},
                                                                   {&c.beta, "beta"},
                                                                   {&c.running_mean, "running_mean"},
                                                                   {&c.running_var, "running_var"},
                                                                   {&c.saved_mean, "saved_mean"},
                                                                   {&c.saved_invstd, "saved_invstd"}};
  for (const auto& [t, what] : channel_tensors) {
    require_f32(*t, device, kernel, what);
    require_count(*t, dims.c, kernel, what);
  }
  if (dims.n * dims.h * dims.w < 2) {
    // As the CPU: one value per channel has no variance (the unbiased running variance would
    // divide 0 by 0 and stay NaN).
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": x is " + x.describe() +
                                "; training needs more than one value per channel (N * H * W > 1)");
  }
  return dims;
}

// Backward's checks: x an image, dy and dx (when given) like it, the per-channel tensors f32 {C}
// (dgamma and dbeta when given). Returns x's dims.
ImageDims check_backward(const Tensor& x, const Tensor& dy, const Tensor& dx,
                         std::initializer_list<std::pair<const Tensor*, const char*>> channel_tensors,
                         const Tensor& dgamma, const Tensor& dbeta, Device device, const char* kernel) {
  require_float(x, device, kernel, "x");
  const ImageDims dims = image_dims(x, kernel, "x");
  require_like_x(dy, x, device, kernel, "dy");
  if (dx.defined()) require_like_x(dx, x, device, kernel, "dx");
  for (const auto& [t, what] : channel_tensors) {
    require_f32(*t, device, kernel, what);
    require_count(*t, dims.c, kernel, what);
  }
  for (const auto& [t, what] : {std::pair{&dgamma, "dgamma"}, std::pair{&dbeta, "dbeta"}}) {
    if (!t->defined()) continue;
    require_f32(*t, device, kernel, what);
    require_count(*t, dims.c, kernel, what);
  }
  return dims;
}

void* data_or_null(const Tensor& t) { return t.defined() ? t.data() : nullptr; }
float* f32_or_null(const Tensor& t) { return t.defined() ? t.data_as<float>() : nullptr; }

}  // namespace

void CudaBackend::batch_norm_nhwc_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           const Tensor& running_mean, const Tensor& running_var, double momentum,
                                           double eps, bool relu, const Tensor& residual, const Tensor& y,
                                           const Tensor& saved_mean, const Tensor& saved_invstd, ImageDims dims) {
  const Tensor workspace =
      empty({static_cast<std::int64_t>(batch_norm_nhwc_workspace_bytes(dims))}, DType::u8, TensorLayout::nchw);
  batch_norm_nhwc_forward_training(
      x.dtype(), x.data(), gamma.data_as<const float>(), beta.data_as<const float>(), running_mean.data_as<float>(),
      running_var.data_as<float>(), momentum, eps, BnEpilogue{.relu = relu, .residual = data_or_null(residual)},
      y.data(), saved_mean.data_as<float>(), saved_invstd.data_as<float>(), dims, workspace.data(), native(stream_));
}

void CudaBackend::batch_norm_nhwc_gradients(const Tensor& x, const Tensor& relu_out, const Tensor& dy,
                                            const Tensor& gamma, const Tensor& saved_mean, const Tensor& saved_invstd,
                                            const Tensor& dx, const Tensor& dresidual, const Tensor& dgamma,
                                            const Tensor& dbeta, ImageDims dims) {
  const Tensor workspace =
      empty({static_cast<std::int64_t>(batch_norm_nhwc_workspace_bytes(dims))}, DType::u8, TensorLayout::nchw);
  batch_norm_nhwc_backward(x.dtype(), x.data(), data_or_null(relu_out), dy.data(), gamma.data_as<const float>(),
                           saved_mean.data_as<const float>(), saved_invstd.data_as<const float>(), data_or_null(dx),
                           data_or_null(dresidual), f32_or_null(dgamma), f32_or_null(dbeta), dims, workspace.data(),
                           native(stream_));
}

void CudaBackend::batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                              const Tensor& running_mean, const Tensor& running_var, double momentum,
                                              double eps, const Tensor& y, const Tensor& saved_mean,
                                              const Tensor& saved_invstd) {
  constexpr const char* kernel = "batch_norm_forward_training";
  const ImageDims dims =
      check_training_forward(x, y, {gamma, beta, running_mean, running_var, saved_mean, saved_invstd}, device_, kernel);
  const DeviceGuard guard(device_);
  if (dims.nhwc) {
    batch_norm_nhwc_training(x, gamma, beta, running_mean, running_var, momentum, eps, false, Tensor(), y, saved_mean,
                             saved_invstd, dims);
    return;
  }
  if (x.numel() > 0) {
    const TensorDescriptor x_desc(x);
    const BatchNormParamDescriptor param_desc(x_desc, kMode);
    const float one = 1.0f;
    const float zero = 0.0f;
    if (cudnn_ran(cudnnBatchNormalizationForwardTraining(
                      cudnn_.native(), kMode, &one, &zero, x_desc.get(), x.data(), x_desc.get(), y.data(),
                      param_desc.get(), gamma.data(), beta.data(), momentum, running_mean.data(), running_var.data(),
                      eps, saved_mean.data(), saved_invstd.data()),
                  "cudnnBatchNormalizationForwardTraining", __LINE__)) {
      return;
    }
  }
  cuda::batch_norm_forward_training(x.dtype(), x.data(), gamma.data_as<const float>(), beta.data_as<const float>(),
                                    running_mean.data_as<float>(), running_var.data_as<float>(), momentum, eps,
                                    y.data(), saved_mean.data_as<float>(), saved_invstd.data_as<float>(), dims,
                                    native(stream_));
}

void CudaBackend::batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                               const Tensor& running_mean, const Tensor& running_var, double eps,
                                               const Tensor& y) {
  constexpr const char* kernel = "batch_norm_forward_inference";
  require_float(x, device_, kernel, "x");
  require_float(y, device_, kernel, "y", &x);
  const ImageDims dims = image_dims(x, kernel, "x");
  require_shape(y, x.shape(), kernel, "y");
  require_layout(y, x, kernel, "y");
  const std::pair<const Tensor*, const char*> channel_tensors[] = {
      {&gamma, "gamma"}, {&beta, "beta"}, {&running_mean, "running_mean"}, {&running_var, "running_var"}};
  for (const auto& [t, what] : channel_tensors) {
    require_f32(*t, device_, kernel, what);
    require_count(*t, dims.c, kernel, what);
  }
  const DeviceGuard guard(device_);
  cuda::batch_norm_forward_inference(x.dtype(), x.data(), gamma.data_as<const float>(), beta.data_as<const float>(),
                                     running_mean.data_as<const float>(), running_var.data_as<const float>(), eps,
                                     y.data(), dims, native(stream_));
}

void CudaBackend::batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                                      const Tensor& saved_invstd, const Tensor& dx, const Tensor& dgamma,
                                      const Tensor& dbeta) {
  constexpr const char* kernel = "batch_norm_backward";
  const ImageDims dims = check_backward(
      x, dy, dx, {{&gamma, "gamma"}, {&saved_mean, "saved_mean"}, {&saved_invstd, "saved_invstd"}}, dgamma, dbeta,
      device_, kernel);
  const DeviceGuard guard(device_);
  if (dims.nhwc) {
    batch_norm_nhwc_gradients(x, Tensor(), dy, gamma, saved_mean, saved_invstd, dx, Tensor(), dgamma, dbeta, dims);
    return;
  }
  if (x.numel() > 0) {
    const TensorDescriptor x_desc(x);
    const BatchNormParamDescriptor param_desc(x_desc, kMode);
    // cuDNN writes all three gradients: scratch for the ones not asked for.
    const Tensor dx_out = dx.defined() ? dx : empty(x.shape(), x.dtype(), x.layout());
    const Tensor dgamma_out = dgamma.defined() ? dgamma : empty({dims.c}, DType::f32, TensorLayout::nchw);
    const Tensor dbeta_out = dbeta.defined() ? dbeta : empty({dims.c}, DType::f32, TensorLayout::nchw);
    const float one = 1.0f;
    const float zero = 0.0f;
    // dx is written (beta 0); dgamma and dbeta accumulate (beta 1), as every backward here does.
    if (cudnn_ran(cudnnBatchNormalizationBackward(cudnn_.native(), kMode, &one, &zero, &one, &one, x_desc.get(),
                                                  x.data(), x_desc.get(), dy.data(), x_desc.get(), dx_out.data(),
                                                  param_desc.get(), gamma.data(), dgamma_out.data(), dbeta_out.data(),
                                                  kBackwardEpsilon, saved_mean.data(), saved_invstd.data()),
                  "cudnnBatchNormalizationBackward", __LINE__)) {
      return;
    }
  }
  cuda::batch_norm_backward(x.dtype(), x.data(), dy.data(), gamma.data_as<const float>(),
                            saved_mean.data_as<const float>(), saved_invstd.data_as<const float>(),
                            dx.defined() ? dx.data() : nullptr, dgamma.defined() ? dgamma.data_as<float>() : nullptr,
                            dbeta.defined() ? dbeta.data_as<float>() : nullptr, dims, native(stream_));
}

}  // namespace stoke::nn::cuda

namespace stoke::nn::cuda {

// Channels-last: one pass (batch_norm_kernels.cu's epilogue). NCHW, where cuDNN normalises: the
// base's composition of batch norm, add and ReLU.
void CudaBackend::batch_norm_relu_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                                   const Tensor& running_mean, const Tensor& running_var,
                                                   double momentum, double eps, const Tensor& residual, const Tensor& y,
                                                   const Tensor& saved_mean, const Tensor& saved_invstd) {
  constexpr const char* kernel = "batch_norm_relu_forward_training";
  if (!x.defined() || x.layout() != TensorLayout::nhwc) {
    Backend::batch_norm_relu_forward_training(x, gamma, beta, running_mean, running_var, momentum, eps, residual, y,
                                              saved_mean, saved_invstd);
    return;
  }
  const ImageDims dims =
      check_training_forward(x, y, {gamma, beta, running_mean, running_var, saved_mean, saved_invstd}, device_, kernel);
  if (residual.defined()) require_like_x(residual, x, device_, kernel, "residual");
  const DeviceGuard guard(device_);
  batch_norm_nhwc_training(x, gamma, beta, running_mean, running_var, momentum, eps, true, residual, y, saved_mean,
                           saved_invstd, dims);
}

void CudaBackend::batch_norm_relu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                                           const Tensor& saved_mean, const Tensor& saved_invstd, const Tensor& dx,
                                           const Tensor& dresidual, const Tensor& dgamma, const Tensor& dbeta) {
  constexpr const char* kernel = "batch_norm_relu_backward";
  if (!x.defined() || x.layout() != TensorLayout::nhwc) {
    Backend::batch_norm_relu_backward(x, y, dy, gamma, saved_mean, saved_invstd, dx, dresidual, dgamma, dbeta);
    return;
  }
  const ImageDims dims = check_backward(
      x, dy, dx, {{&gamma, "gamma"}, {&saved_mean, "saved_mean"}, {&saved_invstd, "saved_invstd"}}, dgamma, dbeta,
      device_, kernel);
  require_like_x(y, x, device_, kernel, "y");
  if (dresidual.defined()) require_like_x(dresidual, x, device_, kernel, "dresidual");
  const DeviceGuard guard(device_);
  batch_norm_nhwc_gradients(x, y, dy, gamma, saved_mean, saved_invstd, dx, dresidual, dgamma, dbeta, dims);
}

}  // namespace stoke::nn::cuda
