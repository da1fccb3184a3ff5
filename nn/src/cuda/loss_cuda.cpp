// CudaBackend's losses: argument checks, per-row scratch from the pool, then loss_kernels.cu.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"

namespace stoke::nn::cuda {
namespace {

// What every loss kernel requires of its logits {N, K}, stats {2} f32 and dlogits (none, or the
// logits' dtype and shape).
void require_loss_tensors(Device device, const char* kernel, const Tensor& logits, const Tensor& stats,
                          const Tensor& dlogits) {
  require_float(logits, device, kernel, "logits");
  if (logits.rank() != 2) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": logits are " + logits.describe() +
                                "; expected {N, K}");
  }
  require_f32(stats, device, kernel, "stats");
  require_count(stats, 2, kernel, "stats");
  if (dlogits.defined()) {
    require_float(dlogits, device, kernel, "dlogits", &logits);
    require_shape(dlogits, logits.shape(), kernel, "dlogits");
  }
}

}  // namespace

// The losses' per-row scratch {rows, 2}: each row's loss and hit, summed by a second kernel in
// row order (deterministic, no atomics). It goes back to the pool when the call returns; later
// users of that memory are ordered after this call's kernels by the stream.
Tensor CudaBackend::row_scratch(std::int64_t rows) {
  return empty({std::max<std::int64_t>(rows, 1), 2}, DType::f32, TensorLayout::nchw);
}

void CudaBackend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels, float smoothing, float grad_scale,
                                        const Tensor& stats, const Tensor& dlogits) {
  constexpr const char* kernel = "softmax_cross_entropy";
  require_loss_tensors(device_, kernel, logits, stats, dlogits);
  const std::int64_t rows = logits.dim(0);
  const std::int64_t classes = logits.dim(1);
  require_on(labels, device_, kernel, "labels");
  if (labels.dtype() != DType::i32 || labels.shape() != Shape{rows}) {
    throw std::invalid_argument("CudaBackend::softmax_cross_entropy: labels are " + labels.describe() +
                                "; expected i32[" + std::to_string(rows) + "]");
  }
  const DeviceGuard guard(device_);
  const Tensor row_stats = row_scratch(rows);
  cuda::softmax_cross_entropy(logits.dtype(), logits.data(), labels.data_as<const std::int32_t>(), rows, classes,
                              smoothing, grad_scale, row_stats.data_as<float>(), stats.data_as<float>(),
                              dlogits.defined() ? dlogits.data() : nullptr, native(stream_));
}

void CudaBackend::binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets,
                                                   const Tensor& pos_weight, float grad_scale, const Tensor& stats,
                                                   const Tensor& dlogits) {
  constexpr const char* kernel = "binary_cross_entropy_with_logits";
  require_loss_tensors(device_, kernel, logits, stats, dlogits);
  const std::int64_t rows = logits.dim(0);
  const std::int64_t classes = logits.dim(1);
  require_f32(targets, device_, kernel, "targets");
  require_shape(targets, logits.shape(), kernel, "targets");
  if (pos_weight.defined()) {
    require_f32(pos_weight, device_, kernel, "pos_weight");
    require_shape(pos_weight, {classes}, kernel, "pos_weight");
  }
  const DeviceGuard guard(device_);
  const Tensor row_stats = row_scratch(rows);
  cuda::binary_cross_entropy_with_logits(logits.dtype(), logits.data(), targets.data_as<const float>(),
                                         pos_weight.defined() ? pos_weight.data_as<const float>() : nullptr, rows,
                                         classes, grad_scale, row_stats.data_as<float>(), stats.data_as<float>(),
                                         dlogits.defined() ? dlogits.data() : nullptr, native(stream_));
}

}  // namespace stoke::nn::cuda
