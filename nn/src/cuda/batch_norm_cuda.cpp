// CudaBackend's batch normalisation: argument checks, then batch_norm_kernels.cu's kernels.
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"

namespace stoke::nn::cuda {

void CudaBackend::batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                              const Tensor& running_mean, const Tensor& running_var, double momentum,
                                              double eps, const Tensor& y, const Tensor& saved_mean,
                                              const Tensor& saved_invstd) {
  constexpr const char* kernel = "batch_norm_forward_training";
  require_float(x, device_, kernel, "x");
  require_float(y, device_, kernel, "y", &x);
  const ImageDims dims = image_dims(x, kernel, "x");
  require_shape(y, x.shape(), kernel, "y");
  require_layout(y, x, kernel, "y");
  const std::pair<const Tensor*, const char*> channel_tensors[] = {{&gamma, "gamma"},
                                                                   {&beta, "beta"},
                                                                   {&running_mean, "running_mean"},
                                                                   {&running_var, "running_var"},
                                                                   {&saved_mean, "saved_mean"},
                                                                   {&saved_invstd, "saved_invstd"}};
  for (const auto& [t, what] : channel_tensors) {
    require_f32(*t, device_, kernel, what);
    require_count(*t, dims.c, kernel, what);
  }
  if (dims.n * dims.h * dims.w < 2) {
    // As the CPU: one value per channel has no variance (the unbiased running variance would
    // divide 0 by 0 and stay NaN).
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": x is " + x.describe() +
                                "; training needs more than one value per channel (N * H * W > 1)");
  }
  const DeviceGuard guard(device_);
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
  require_float(x, device_, kernel, "x");
  require_float(dy, device_, kernel, "dy", &x);
  const ImageDims dims = image_dims(x, kernel, "x");
  require_shape(dy, x.shape(), kernel, "dy");
  require_layout(dy, x, kernel, "dy");
  if (dx.defined()) {
    require_float(dx, device_, kernel, "dx", &x);
    require_shape(dx, x.shape(), kernel, "dx");
    require_layout(dx, x, kernel, "dx");
  }
  const std::pair<const Tensor*, const char*> channel_tensors[] = {
      {&gamma, "gamma"}, {&saved_mean, "saved_mean"}, {&saved_invstd, "saved_invstd"}};
  for (const auto& [t, what] : channel_tensors) {
    require_f32(*t, device_, kernel, what);
    require_count(*t, dims.c, kernel, what);
  }
  for (const auto& [t, what] : {std::pair{&dgamma, "dgamma"}, std::pair{&dbeta, "dbeta"}}) {
    if (!t->defined()) continue;
    require_f32(*t, device_, kernel, what);
    require_count(*t, dims.c, kernel, what);
  }
  const DeviceGuard guard(device_);
  cuda::batch_norm_backward(x.dtype(), x.data(), dy.data(), gamma.data_as<const float>(),
                            saved_mean.data_as<const float>(), saved_invstd.data_as<const float>(),
                            dx.defined() ? dx.data() : nullptr, dgamma.defined() ? dgamma.data_as<float>() : nullptr,
                            dbeta.defined() ? dbeta.data_as<float>() : nullptr, dims, native(stream_));
}

}  // namespace stoke::nn::cuda
