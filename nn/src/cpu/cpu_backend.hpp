// CpuBackend: the reference kernels of nn/, f32 and NCHW, on the host. Correct first; then
// fast enough to train the small models on a few cores: im2col + OpenBLAS's sgemm for
// convolution and Linear, oneTBB across items and channels. OpenBLAS runs single-threaded inside
// these kernels (oneTBB does the threading), so the two never oversubscribe the cores.
//
// Channels-last (NHWC) calls are computed on NCHW copies (NchwCopies, channels_last_cpu.cpp).
//
// Its methods live in one file per kind of kernel: conv2d_cpu.cpp, linear_cpu.cpp,
// batch_norm_cpu.cpp, elementwise_cpu.cpp (relu, add, dropout, cast, scale, all_finite),
// pooling_cpu.cpp, loss_cpu.cpp (softmax and binary cross-entropy), optimizer_cpu.cpp (SGD and
// AdamW); cpu_backend.cpp has the rest.
//
// Every parallel loop of the kernels goes through isolated_parallel_for/_reduce below, so a call
// can be made from inside a oneTBB task of the pipeline (a graph stage) without wrapping it in
// tbb::this_task_arena::isolate: while a kernel's thread waits for its loop, it runs only that
// loop's tasks.
#pragma once

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <oneapi/tbb/task_arena.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoke/base/block_cache.hpp"
#include "stoke/nn/backend.hpp"

namespace stoke::nn {

class HostPool;

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;

  Device device() const noexcept override { return Device::cpu(); }
  StreamView stream() const noexcept override { return StreamView::host(); }
  std::string describe() const override;
  /// f32, in NCHW or NHWC: a channels-last call computes on NCHW copies (NchwCopies below).
  bool supports(DType dtype, TensorLayout layout) const noexcept override;
  Tensor empty(Shape shape, DType dtype, TensorLayout layout) override;

  void conv2d_forward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y) override;
  void conv2d_backward_data(const Conv2dGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) override;
  void conv2d_backward_filter(const Conv2dGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                              const Tensor& db) override;

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override;
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                       const Tensor& db) override;

  void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                                   const Tensor& running_var, double momentum, double eps, const Tensor& y,
                                   const Tensor& saved_mean, const Tensor& saved_invstd) override;
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
  void binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& pos_weight,
                                        float grad_scale, const Tensor& stats, const Tensor& dlogits) override;

  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdStep& step) override;
  void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const AdamWStep& step) override;
  void cast(const Tensor& src, const Tensor& dst) override;
  bool all_finite(const Tensor& x) override;
  void scale(const Tensor& x, float alpha) override;

 private:
  // empty()'s memory: blocks of large tensors are kept for reuse (see HostPool in cpu_backend.cpp).
  std::shared_ptr<HostPool> pool_;
};

/// Host memory cached by CpuBackend::empty(). A training step allocates the same activations and
/// gradients step after step; fresh memory of that size comes from mmap, and touching it costs a
/// page fault per 4 KiB (about a tenth of a small CNN's step on two cores), so freed blocks are
/// kept and handed out again (base::BlockCache). Blocks of at least kMinBytes are pooled, binned
/// by size as DevicePool bins them; the cache holds at most kMaxCachedBytes (the least recently
/// used sizes are freed first to keep a new block), so the memory held beyond what tensors use is
/// bounded. Thread-safe; tensors may outlive it (the cache goes with the last of them).
class HostPool {
 public:
  static constexpr std::size_t kMinBytes = std::size_t{64} << 10;
  static constexpr std::size_t kMaxCachedBytes = std::size_t{256} << 20;

  HostPool();
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  /// At least `bytes` (64-byte aligned), owned by the returned pointer, which hands the block back.
  std::shared_ptr<void> allocate(std::size_t bytes);
  /// The size a request of `bytes` is rounded up to.
  static std::size_t bin_size(std::size_t bytes) noexcept;
  /// Bytes held free for reuse.
  std::size_t cached_bytes() const;

 private:
  std::shared_ptr<base::BlockCache> cache_;
};

/// tbb::parallel_for(range, body, partitioner...) with the calling thread isolated: while it
/// waits for the loop's tasks it takes no other task of the arena. Without this, a pipeline
/// thread that runs a step and waits in a kernel's loop could pick up an unrelated task (another
/// stage's body, the next batch's step) and hold the step until that task ends, or re-enter the
/// backend, which is used by one thread at a time. How the range is cut is tbb::parallel_for's,
/// unchanged.
template <class Range, class Body, class... Partitioner>
void isolated_parallel_for(const Range& range, const Body& body, const Partitioner&... partitioner) {
  tbb::this_task_arena::isolate([&] { tbb::parallel_for(range, body, partitioner...); });
}

/// tbb::parallel_reduce(range, identity, body, reduction), isolated as isolated_parallel_for.
template <class Range, class Value, class Body, class Reduction>
Value isolated_parallel_reduce(const Range& range, const Value& identity, const Body& body,
                               const Reduction& reduction) {
  return tbb::this_task_arena::isolate([&] { return tbb::parallel_reduce(range, identity, body, reduction); });
}

/// Elements per task of the elementwise kernels: enough work to pay for a task.
inline constexpr std::int64_t kGrain = std::int64_t{1} << 16;

/// Calls body(begin, end) over [0, n) in chunks of about kGrain elements, in parallel (on the
/// calling thread alone when n is small), isolated as isolated_parallel_for.
template <class Body>
void for_chunks(std::int64_t n, const Body& body) {
  if (n <= kGrain) {
    if (n > 0) body(std::int64_t{0}, n);
    return;
  }
  isolated_parallel_for(tbb::blocked_range<std::int64_t>(0, n, kGrain),
                        [&](const tbb::blocked_range<std::int64_t>& range) { body(range.begin(), range.end()); });
}

/// Throws std::invalid_argument naming `what` unless `t` is an f32 tensor on the CPU in NCHW
/// (row-major) order: what every CpuBackend kernel takes.
void require_cpu_f32(const Tensor& t, const char* what);

/// Throws std::invalid_argument naming `what` unless `t` is an f32 tensor on the CPU, in either
/// layout: what the kernels that go element by element take (their operands in one layout).
void require_cpu_f32_elements(const Tensor& t, const char* what);
/// Throws std::invalid_argument naming `kernel` unless the 4-d tensors among `tensors` (undefined
/// ones and others ignored) share one layout: element-wise kernels pair elements by memory order.
void require_one_layout(std::initializer_list<const Tensor*> tensors, const char* kernel);

/// The CPU kernels are NCHW ones. A call with channels-last (NHWC) operands computes on NCHW
/// copies of them and writes its outputs back: the same numbers as the NCHW call, bit for bit,
/// at the price of two transpositions. The CPU gains no speed from channels-last; it takes it so
/// that a channels-last run can be checked against an NCHW one, and any code runs on any backend.
///
///   if (NchwCopies::needed({&x, &y})) {
///     NchwCopies nchw;
///     relayouted_kernel(nchw.in(x), nchw.out(y));
///     nchw.write_back();
///   }
class NchwCopies {
 public:
  /// True when any of `tensors` (undefined ones ignored) is a 4-d NHWC tensor.
  static bool needed(std::initializer_list<const Tensor*> tensors) noexcept;
  /// `t` itself when it is not 4-d NHWC, else an NCHW copy.
  Tensor in(const Tensor& t);
  /// The same, for a tensor the kernel writes (or accumulates into: the copy holds t's values);
  /// write_back() copies it into `t`.
  Tensor out(const Tensor& t);
  /// Copies the outputs' NCHW results into the NHWC tensors given to out().
  void write_back();

 private:
  std::vector<std::pair<Tensor, Tensor>> outputs_;  // (the NHWC tensor, its NCHW copy)
};

/// Throws std::invalid_argument "CpuBackend: <what> is <t>; expected <shape>" unless `t` has the
/// shape `expected`.
void require_cpu_shape(const Tensor& t, const Shape& expected, const std::string& what);

}  // namespace stoke::nn
