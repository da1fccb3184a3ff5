// CpuBackend: the reference kernels of gpu/nn, f32 and NCHW, on the host. Correct first; then
// fast enough to train the small models on a few cores: im2col + OpenBLAS's sgemm for
// convolution and Linear, oneTBB across items and channels. OpenBLAS runs single-threaded inside
// these kernels (oneTBB does the threading), so the two never oversubscribe the cores.
//
// Its methods live in one file per kind of kernel: conv2d_cpu.cpp, linear_cpu.cpp,
// batch_norm_cpu.cpp, elementwise_cpu.cpp (relu, add, dropout, cast, scale, all_finite),
// pooling_cpu.cpp, loss_cpu.cpp, optimizer_cpu.cpp; cpu_backend.cpp has the rest.
#pragma once

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cstdint>
#include <string>

#include "stoke/gpu/nn/backend.hpp"

namespace stoke::gpu::nn {

class CpuBackend final : public Backend {
 public:
  CpuBackend();

  Device device() const noexcept override { return Device::cpu(); }
  StreamView stream() const noexcept override { return StreamView::host(); }
  std::string describe() const override;
  Tensor empty(Shape shape, DType dtype, TensorLayout layout) override;

  void conv2d_forward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y) override;
  void conv2d_backward_data(const Conv2dGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) override;
  void conv2d_backward_filter(const Conv2dGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                              const Tensor& db) override;

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                       const Tensor& db) override;

  void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   const Tensor& running_mean, const Tensor& running_var, double momentum, double eps,
                                   const Tensor& y, const Tensor& saved_mean, const Tensor& saved_invstd) override;
  void batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& running_mean, const Tensor& running_var, double eps,
                                    const Tensor& y) override;
  void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                           const Tensor& saved_invstd, const Tensor& dx, const Tensor& dgamma,
                           const Tensor& dbeta) override;

  void relu_forward(const Tensor& x, const Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) override;
  void add(const Tensor& a, const Tensor& b, const Tensor& y) override;
  void dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask, const Tensor& y) override;
  void dropout_backward(const Tensor& dy, const Tensor& mask, float p, const Tensor& dx) override;

  void max_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y) override;
  void max_pool2d_backward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                           const Tensor& dx) override;
  void global_avg_pool_forward(const Tensor& x, const Tensor& y) override;
  void global_avg_pool_backward(const Tensor& dy, const Tensor& dx) override;

  void softmax_cross_entropy(const Tensor& logits, const Tensor& labels, float smoothing, float grad_scale,
                             const Tensor& stats, const Tensor& dlogits) override;

  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                  const SgdStep& step) override;
  void cast(const Tensor& src, const Tensor& dst) override;
  bool all_finite(const Tensor& x) override;
  void scale(const Tensor& x, float alpha) override;
};

/// Elements per task of the elementwise kernels: enough work to pay for a task.
inline constexpr std::int64_t kGrain = std::int64_t{1} << 16;

/// Calls body(begin, end) over [0, n) in chunks of about kGrain elements, in parallel (on the
/// calling thread alone when n is small).
template <class Body>
void for_chunks(std::int64_t n, const Body& body) {
  if (n <= kGrain) {
    if (n > 0) body(std::int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, kGrain),
                    [&](const tbb::blocked_range<std::int64_t>& range) { body(range.begin(), range.end()); });
}

/// Throws std::invalid_argument naming `what` unless `t` is an f32 tensor on the CPU in NCHW
/// (row-major) order: what every CpuBackend kernel takes.
void require_cpu_f32(const Tensor& t, const char* what);

}  // namespace stoke::gpu::nn
