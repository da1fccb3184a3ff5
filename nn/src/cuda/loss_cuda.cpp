// CudaBackend's losses: argument checks, per-row scratch from the pool, then loss_kernels.cu.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"

namespace stoke::nn::cuda {

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

}  // namespace stoke::nn::cuda
