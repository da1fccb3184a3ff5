// CudaBackend: nn's kernels on one CUDA device, enqueued on one stream (backend.hpp). f32,
// bf16 and f16; NCHW and NHWC. Convolutions are cuDNN's (the algorithm of each distinct problem
// found once by cuDNN's own timing search and kept in a file for the next process on the same GPU
// and cuDNN (conv_algorithm_cache.hpp), with one shared workspace), Linear is cuBLAS's GEMM,
// everything else is a plain kernel (kernels.hpp). Memory comes from a caching pool
// (device_pool.hpp), so a step allocates nothing from the driver once the shapes are known.
//
// Its methods live in one file set per op family, as CpuBackend's: conv2d_cuda.cpp (cuDNN),
// linear_cuda.cpp (cuBLAS), both with bias_kernels.cu; batch_norm_cuda.cpp +
// batch_norm_kernels.cu; elementwise_cuda.cpp + elementwise_kernels.cu (relu, add, dropout,
// cast, scale, all_finite); pooling_cuda.cpp + pooling_kernels.cu; loss_cuda.cpp +
// loss_kernels.cu; optimizer_cuda.cpp + optimizer_kernels.cu. cuda_backend.cpp has the
// construction, the memory and the workspace.
#pragma once

#include <cudnn.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "../conv_algorithm_cache.hpp"
#include "device_pool.hpp"
#include "kernels.hpp"
#include "stoke/gpu/handles.hpp"
#include "stoke/nn/backend.hpp"
#include "stoke/nn/device.hpp"

namespace stoke::nn {

/// The CUDA backend of `device`, whose kernels run on `stream` (which must outlive it).
std::unique_ptr<Backend> make_cuda_backend(Device device, StreamView stream);

namespace cuda {

class CudaBackend final : public Backend {
 public:
  /// Throws DeviceError for a host stream or a stream of another device.
  CudaBackend(Device device, StreamView stream);
  ~CudaBackend() override;

  Device device() const noexcept override { return device_; }
  StreamView stream() const noexcept override { return stream_; }
  std::string describe() const override;
  bool supports(DType dtype, TensorLayout layout) const noexcept override;
  TensorLayout preferred_layout(DType dtype) const noexcept override;
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
  void batch_norm_relu_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                        const Tensor& running_mean, const Tensor& running_var, double momentum,
                                        double eps, const Tensor& residual, const Tensor& y, const Tensor& saved_mean,
                                        const Tensor& saved_invstd) override;
  void batch_norm_relu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                                const Tensor& saved_mean, const Tensor& saved_invstd, const Tensor& dx,
                                const Tensor& dresidual, const Tensor& dgamma, const Tensor& dbeta) override;

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
  bool all_finite_in(std::span<const Tensor> xs) override;
  void scale(const Tensor& x, float alpha) override;
  void multiply_by_loss_scale(const Tensor& x, const Tensor& state) override;
  void find_non_finite(std::span<const Tensor> xs, const Tensor& state) override;
  void update_loss_scale(const Tensor& state, float growth, float backoff, int growth_interval) override;

  const DevicePool& pool() const noexcept { return pool_; }

 private:
  // A convolution algorithm found by cuDNN for one problem, with the math it was timed with.
  struct ConvAlgo {
    int algo = 0;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    std::size_t workspace = 0;
  };
  /// The workspace, grown to at least `bytes`.
  void* workspace(std::size_t bytes);
  /// Channels-last batch norm's training passes (batch_norm_cuda.cpp), after the checks: forward
  /// with its epilogue (a ReLU, a residual), and the gradients, of a forward with a ReLU when
  /// relu_out (its output) is given.
  void batch_norm_nhwc_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                                const Tensor& running_var, double momentum, double eps, bool relu,
                                const Tensor& residual, const Tensor& y, const Tensor& saved_mean,
                                const Tensor& saved_invstd, ImageDims dims);
  void batch_norm_nhwc_gradients(const Tensor& x, const Tensor& relu_out, const Tensor& dy, const Tensor& gamma,
                                 const Tensor& saved_mean, const Tensor& saved_invstd, const Tensor& dx,
                                 const Tensor& dresidual, const Tensor& dgamma, const Tensor& dbeta, ImageDims dims);
  /// The losses' per-row scratch: f32 {max(rows, 1), 2} from the pool (loss_cuda.cpp).
  Tensor row_scratch(std::int64_t rows);
  /// The algorithm cached for `key`, in memory or else in the algorithm file; else runs
  /// `find(results, capacity, &count, search_workspace, search_bytes)` (a cudnnFind*AlgorithmEx
  /// call) into an array of Count Perf results, caches the fastest that ran in both, and returns
  /// it (conv2d_cuda.cpp).
  template <class Perf, int Count, class Find>
  const ConvAlgo& conv_algo(const std::string& key, DType dtype, Find&& find);
  /// The file's choice for `key` when this process can use it: an algorithm below `count`, a
  /// known math type, a workspace no larger than a search would allow now.
  std::optional<ConvAlgo> saved_conv_algo(const std::string& key, DType dtype, int count) const;
  /// Adds a search's choice to the algorithm file and rewrites it (a failure is a warning).
  void save_conv_algo(const std::string& key, const ConvAlgo& chosen);

  Device device_;
  StreamView stream_;
  gpu::CudnnHandle cudnn_;
  gpu::CublasHandle cublas_;
  DevicePool pool_;
  DeviceBuffer workspace_;
  // Keyed by the problem (conv2d_cuda.cpp's problem_key): direction, shapes, geometry, dtype, layouts.
  std::map<std::string, ConvAlgo> conv_algos_;
  // The searches' choices of earlier processes on this GPU model and cuDNN, and this one's;
  // nullopt when STOKE_CUDNN_CACHE=0 or there is no cache folder.
  std::optional<ConvAlgorithmCache> conv_algo_file_;
  DeviceBuffer finite_count_;  // all_finite's counter (one unsigned)
  std::string name_;
};

}  // namespace cuda
}  // namespace stoke::nn
