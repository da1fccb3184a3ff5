#include "cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "../dropout_mask.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"
#include "stoke/graph/random.hpp"
#include "stoke/nn/device.hpp"

namespace stoke::nn {

// The CPU's dropout uses graph::mix64; the device's copy of it must be the same function.
static_assert(dropout::mix64(0) == graph::mix64(0) && dropout::mix64(12345) == graph::mix64(12345) &&
                  dropout::mix64(~0ULL) == graph::mix64(~0ULL),
              "dropout::mix64 must equal stoke::graph::mix64");

std::unique_ptr<Backend> make_cuda_backend(Device device, StreamView stream) {
  return std::make_unique<cuda::CudaBackend>(device, stream);
}

namespace cuda {
namespace {

cudaStream_t native(StreamView stream) { return stream.native(); }

StreamView checked_stream(Device device, StreamView stream) {
  if (!device.is_cuda()) throw DeviceError("CudaBackend: " + device.str() + " is not a CUDA device");
  if (stream.is_host() || stream.native() == nullptr) {
    throw DeviceError("CudaBackend(" + device.str() +
                      "): needs a CUDA stream of the device (stoke never uses CUDA's legacy default stream)");
  }
  if (stream.device() != device) {
    throw DeviceError("CudaBackend(" + device.str() + "): the stream is on " + stream.device().str());
  }
  return stream;
}

std::string version_text(std::size_t version) {
  // cuDNN 9 and cuBLAS both count major * 10000 + minor * 100 + patch.
  return std::to_string(version / 10000) + "." + std::to_string(version % 10000 / 100) + "." +
         std::to_string(version % 100);
}

void require_probability(float p, const char* kernel) {
  if (!(p >= 0 && p < 1)) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": p = " + std::to_string(p) +
                                " is outside [0, 1)");
  }
}

}  // namespace

CudaBackend::CudaBackend(Device device, StreamView stream)
    : device_(device),
      stream_(checked_stream(device, stream)),
      cudnn_(stream_),
      cublas_(stream_),
      pool_(device),
      finite_count_(device, sizeof(unsigned)) {
  const DeviceGuard guard(device_);
  cudaDeviceProp properties{};
  STOKE_CUDA_CHECK(cudaGetDeviceProperties(&properties, device_.ordinal()));
  int cublas_version = 0;
  STOKE_CUBLAS_CHECK(cublasGetVersion(cublas_.native(), &cublas_version));
  name_ = device_.str() + " " + properties.name + " (cuDNN " + version_text(cudnnGetVersion()) + ", cuBLAS " +
          version_text(static_cast<std::size_t>(cublas_version)) + ")";
}

// The pool, the workspace and the handles free themselves; cudaFree and cudnnDestroy wait for
// the device, so no queued kernel loses its memory.
CudaBackend::~CudaBackend() = default;

std::string CudaBackend::describe() const { return name_; }

Tensor CudaBackend::empty(Shape shape, DType dtype, TensorLayout layout) {
  for (const std::int64_t d : shape) {
    if (d < 0)
      throw std::invalid_argument("CudaBackend::empty: shape " + to_string(shape) + " has a negative dimension");
  }
  const std::size_t bytes = static_cast<std::size_t>(element_count(shape)) * element_size(dtype);
  return Tensor::from_owner(pool_.allocate(bytes), std::move(shape), dtype, device_, layout);
}

void* CudaBackend::workspace(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (workspace_.size() < bytes) {
    workspace_ = DeviceBuffer();  // free the old one first (cudaFree waits for its users)
    workspace_ = DeviceBuffer(device_, bytes);
  }
  return workspace_.data();
}

// ---- batch normalisation

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

// ---- elementwise

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

// ---- pooling

void CudaBackend::max_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y) {
  constexpr const char* kernel = "max_pool2d_forward";
  require_float(x, device_, kernel, "x");
  require_float(y, device_, kernel, "y", &x);
  const ImageDims in = image_dims(x, kernel, "x");
  require_shape(y, {x.dim(0), x.dim(1), g.output_size(x.dim(2)), g.output_size(x.dim(3))}, kernel, "y");
  require_layout(y, x, kernel, "y");
  const DeviceGuard guard(device_);
  cuda::max_pool2d_forward(x.dtype(), {g.kernel, g.stride, g.padding}, x.data(), in, y.data(),
                           image_dims(y, kernel, "y"), native(stream_));
}

void CudaBackend::max_pool2d_backward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                                      const Tensor& dx) {
  constexpr const char* kernel = "max_pool2d_backward";
  require_float(x, device_, kernel, "x");
  require_float(dy, device_, kernel, "dy", &x);
  require_float(dx, device_, kernel, "dx", &x);
  const ImageDims in = image_dims(x, kernel, "x");
  const Shape pooled{x.dim(0), x.dim(1), g.output_size(x.dim(2)), g.output_size(x.dim(3))};
  if (y.defined()) require_shape(y, pooled, kernel, "y");  // unused: winners are found again from x
  require_shape(dy, pooled, kernel, "dy");
  require_shape(dx, x.shape(), kernel, "dx");
  require_layout(dy, x, kernel, "dy");
  require_layout(dx, x, kernel, "dx");
  const DeviceGuard guard(device_);
  cuda::max_pool2d_backward(x.dtype(), {g.kernel, g.stride, g.padding}, x.data(), in, dy.data(),
                            image_dims(dy, kernel, "dy"), dx.data(), native(stream_));
}

void CudaBackend::global_avg_pool_forward(const Tensor& x, const Tensor& y) {
  constexpr const char* kernel = "global_avg_pool_forward";
  require_float(x, device_, kernel, "x");
  require_float(y, device_, kernel, "y", &x);
  const ImageDims in = image_dims(x, kernel, "x");
  require_shape(y, {x.dim(0), x.dim(1)}, kernel, "y");
  const DeviceGuard guard(device_);
  cuda::global_avg_pool_forward(x.dtype(), x.data(), in, y.data(), native(stream_));
}

void CudaBackend::global_avg_pool_backward(const Tensor& dy, const Tensor& dx) {
  constexpr const char* kernel = "global_avg_pool_backward";
  require_float(dx, device_, kernel, "dx");
  require_float(dy, device_, kernel, "dy", &dx);
  const ImageDims in = image_dims(dx, kernel, "dx");
  require_shape(dy, {dx.dim(0), dx.dim(1)}, kernel, "dy");
  const DeviceGuard guard(device_);
  cuda::global_avg_pool_backward(dx.dtype(), dy.data(), dx.data(), in, native(stream_));
}

// ---- loss

void CudaBackend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels, float smoothing, float grad_scale,
                                        const Tensor& stats, const Tensor& dlogits) {
  constexpr const char* kernel = "softmax_cross_entropy";
  require_float(logits, device_, kernel, "logits");
  if (logits.rank() != 2) {
    throw std::invalid_argument("CudaBackend::softmax_cross_entropy: logits are " + logits.describe() +
                                "; expected {N, K}");
  }
  const std::int64_t rows = logits.dim(0);
  const std::int64_t classes = logits.dim(1);
  require_on(labels, device_, kernel, "labels");
  if (labels.dtype() != DType::i32 || labels.shape() != Shape{rows}) {
    throw std::invalid_argument("CudaBackend::softmax_cross_entropy: labels are " + labels.describe() +
                                "; expected i32[" + std::to_string(rows) + "]");
  }
  require_f32(stats, device_, kernel, "stats");
  require_count(stats, 2, kernel, "stats");
  if (dlogits.defined()) {
    require_float(dlogits, device_, kernel, "dlogits", &logits);
    require_shape(dlogits, logits.shape(), kernel, "dlogits");
  }
  const DeviceGuard guard(device_);
  // Per-row losses and hits, summed by a second kernel in row order: deterministic, no atomics.
  // The scratch goes back to the pool at once; later users of it are ordered after this call's
  // kernels by the stream.
  const Tensor row_stats = empty({std::max<std::int64_t>(rows, 1), 2}, DType::f32, TensorLayout::nchw);
  cuda::softmax_cross_entropy(logits.dtype(), logits.data(), labels.data_as<const std::int32_t>(), rows, classes,
                              smoothing, grad_scale, row_stats.data_as<float>(), stats.data_as<float>(),
                              dlogits.defined() ? dlogits.data() : nullptr, native(stream_));
}

// ---- optimizer and precision

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

bool CudaBackend::supports(DType dtype, TensorLayout /*layout*/) const noexcept { return is_float_type(dtype); }

void CudaBackend::scale(const Tensor& x, float alpha) {
  require_float(x, device_, "scale", "x");
  const DeviceGuard guard(device_);
  cuda::scale(x.dtype(), x.data(), alpha, x.numel(), native(stream_));
}

}  // namespace cuda
}  // namespace stoke::nn
