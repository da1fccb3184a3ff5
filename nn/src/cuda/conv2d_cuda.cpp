// CudaBackend's convolutions, by cuDNN. Each distinct problem (direction, shapes, geometry,
// dtype, layouts) gets its algorithm once, from cuDNN's own timing search
// (cudnnFind*AlgorithmEx on the call's real buffers), which is cached in memory and in a file of
// the GPU model and cuDNN version (conv_algorithm_cache.hpp), so that later calls, and the next
// process's, go straight to the kernel. A single workspace, grown to the largest algorithm's need,
// serves every call (the calls are ordered on one stream, so they never use it at the same time).
//
// The bias is added, and its gradient summed, by CudaBackend's own per-channel kernels
// (bias_kernels.cu), which take every dtype and layout alike.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <optional>
#include <stdexcept>
#include <string>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "cudnn_descriptors.hpp"
#include "kernels.hpp"
#include "stoke/nn/device.hpp"

namespace stoke::nn::cuda {
namespace {

// The most workspace the search lets an algorithm have (bounded by half the free memory).
constexpr std::size_t kSearchWorkspaceCap = std::size_t{256} << 20;

std::string problem_key(const char* direction, const Conv2dGeometry& g, const Tensor& x, const Tensor& w,
                        const Tensor& y) {
  return std::string(direction) + " x" + to_string(x.shape()) + std::string(to_string(x.layout())) + " w" +
         to_string(w.shape()) + std::string(to_string(w.layout())) + " y" + to_string(y.shape()) +
         std::string(to_string(y.layout())) + " " + std::string(to_string(x.dtype())) + " k" +
         std::to_string(g.kernel) + " s" + std::to_string(g.stride) + " p" + std::to_string(g.padding) + " d" +
         std::to_string(g.dilation) + " g" + std::to_string(g.groups);
}

// Checks a convolution's tensors: x {N, Cin, H, W}, w g.weight_shape(), y {N, Cout, Ho, Wo}, all
// of x's dtype and layout on `device`.
void check_problem(const char* kernel, const Conv2dGeometry& g, const Tensor& x, const char* x_name, const Tensor& w,
                   const Tensor& y, const char* y_name, Device device) {
  require_float(x, device, kernel, x_name);
  require_float(w, device, kernel, "w", &x);
  require_float(y, device, kernel, y_name, &x);
  image_dims(x, kernel, x_name);
  if (x.dim(1) != g.in_channels) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": " + x_name + " is " + x.describe() +
                                "; expected " + std::to_string(g.in_channels) + " channels");
  }
  require_shape(w, g.weight_shape(), kernel, "w");
  require_shape(y, {x.dim(0), g.out_channels, g.output_size(x.dim(2)), g.output_size(x.dim(3))}, kernel, y_name);
  require_layout(y, x, kernel, y_name);
}

std::size_t search_workspace_bytes(Device device) {
  const gpu::MemoryInfo memory = gpu::memory_info(device);
  return std::min(kSearchWorkspaceCap, memory.free / 2);
}

// The fastest algorithm that ran, of `count` results sorted by time.
template <class Perf>
const Perf& fastest(const Perf* results, int count, const std::string& key) {
  for (int i = 0; i < count; ++i) {
    if (results[i].status == CUDNN_STATUS_SUCCESS) return results[i];
  }
  throw std::runtime_error("CudaBackend: cuDNN has no algorithm for the convolution " + key +
                           " (every candidate failed; try the other layout or f32)");
}

// The math to run an algorithm with: what the search timed it with for bf16 and f16; always
// plain FMA for f32, since cuDNN's default math may use TF32 tensor cores, which round the inputs
// to 10 mantissa bits and would put f32 results far from the CPU's.
cudnnMathType_t math_for(DType dtype, cudnnMathType_t searched) {
  return dtype == DType::f32 ? CUDNN_FMA_MATH : searched;
}

bool is_math_type(int math) {
  return math == CUDNN_DEFAULT_MATH || math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ||
         math == CUDNN_FMA_MATH;
}

}  // namespace

template <class Perf, int Count, class Find>
const CudaBackend::ConvAlgo& CudaBackend::conv_algo(const std::string& key, DType dtype, Find&& find) {
  auto found = conv_algos_.find(key);
  if (found != conv_algos_.end()) return found->second;
  if (const std::optional<ConvAlgo> saved = saved_conv_algo(key, dtype, Count)) {
    return conv_algos_.emplace(key, *saved).first->second;
  }
  std::array<Perf, Count> results{};
  int count = 0;
  const DeviceBuffer search(device_, std::max<std::size_t>(search_workspace_bytes(device_), 1));
  find(results.data(), Count, &count, search.data(), search.size());
  const Perf& best = fastest(results.data(), count, key);
  const ConvAlgo chosen{static_cast<int>(best.algo), math_for(dtype, best.mathType), best.memory};
  save_conv_algo(key, chosen);
  return conv_algos_.emplace(key, chosen).first->second;
}

std::optional<CudaBackend::ConvAlgo> CudaBackend::saved_conv_algo(const std::string& key, DType dtype,
                                                                  int count) const {
  if (!conv_algo_file_) return std::nullopt;
  const ConvAlgorithmEntry* saved = conv_algo_file_->find(key);
  if (saved == nullptr || saved->algo >= count || !is_math_type(saved->math)) return std::nullopt;
  // Chosen when more memory was free than is now: a search now picks within what there is.
  if (saved->workspace > search_workspace_bytes(device_)) return std::nullopt;
  return ConvAlgo{saved->algo, math_for(dtype, static_cast<cudnnMathType_t>(saved->math)), saved->workspace};
}

void CudaBackend::save_conv_algo(const std::string& key, const ConvAlgo& chosen) {
  if (!conv_algo_file_) return;
  conv_algo_file_->insert(key, {chosen.algo, static_cast<int>(chosen.math), chosen.workspace});
  conv_algo_file_->save();  // a failure is a warning, once
}

void CudaBackend::conv2d_forward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Tensor& y) {
  constexpr const char* kernel = "conv2d_forward";
  check_problem(kernel, g, x, "x", w, y, "y", device_);
  if (b.defined()) {
    require_float(b, device_, kernel, "b", &x);
    require_count(b, g.out_channels, kernel, "b");
  }
  // cuDNN takes no zero dimension; an empty batch has nothing to compute (and adds nothing).
  if (x.dim(0) == 0) return;
  const DeviceGuard guard(device_);
  const TensorDescriptor x_desc(x);
  const FilterDescriptor w_desc(w);
  const TensorDescriptor y_desc(y);
  ConvolutionDescriptor conv(g, x.dtype());
  const std::string key = problem_key("fwd", g, x, w, y);
  const ConvAlgo& algo = conv_algo<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
      key, x.dtype(), [&](auto* results, int capacity, int* count, void* search, std::size_t search_bytes) {
        // Writes y, which this call overwrites anyway.
        STOKE_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(cudnn_.native(), x_desc.get(), x.data(), w_desc.get(),
                                                                 w.data(), conv.get(), y_desc.get(), y.data(), capacity,
                                                                 count, results, search, search_bytes));
      });
  conv.set_math(algo.math);
  const float one = 1.0f;
  const float zero = 0.0f;
  STOKE_CUDNN_CHECK(cudnnConvolutionForward(cudnn_.native(), &one, x_desc.get(), x.data(), w_desc.get(), w.data(),
                                            conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(algo.algo),
                                            workspace(algo.workspace), algo.workspace, &zero, y_desc.get(), y.data()));
  if (b.defined()) add_channel_bias(y.dtype(), y.data(), b.data(), image_dims(y, kernel, "y"), stream_.native());
}

void CudaBackend::conv2d_backward_data(const Conv2dGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  constexpr const char* kernel = "conv2d_backward_data";
  check_problem(kernel, g, dx, "dx", w, dy, "dy", device_);
  if (dx.dim(0) == 0) return;
  const DeviceGuard guard(device_);
  const TensorDescriptor dx_desc(dx);
  const FilterDescriptor w_desc(w);
  const TensorDescriptor dy_desc(dy);
  ConvolutionDescriptor conv(g, dx.dtype());
  const std::string key = problem_key("bwd_data", g, dx, w, dy);
  const ConvAlgo& algo = conv_algo<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
      key, dx.dtype(), [&](auto* results, int capacity, int* count, void* search, std::size_t search_bytes) {
        // Writes dx, which this call overwrites anyway.
        STOKE_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            cudnn_.native(), w_desc.get(), w.data(), dy_desc.get(), dy.data(), conv.get(), dx_desc.get(), dx.data(),
            capacity, count, results, search, search_bytes));
      });
  conv.set_math(algo.math);
  const float one = 1.0f;
  const float zero = 0.0f;
  STOKE_CUDNN_CHECK(
      cudnnConvolutionBackwardData(cudnn_.native(), &one, w_desc.get(), w.data(), dy_desc.get(), dy.data(), conv.get(),
                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(algo.algo), workspace(algo.workspace),
                                   algo.workspace, &zero, dx_desc.get(), dx.data()));
}

void CudaBackend::conv2d_backward_filter(const Conv2dGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                                         const Tensor& db) {
  constexpr const char* kernel = "conv2d_backward_filter";
  check_problem(kernel, g, x, "x", dw, dy, "dy", device_);
  if (db.defined()) {
    require_float(db, device_, kernel, "db", &x);
    require_count(db, g.out_channels, kernel, "db");
  }
  if (x.dim(0) == 0) return;
  const DeviceGuard guard(device_);
  const TensorDescriptor x_desc(x);
  const FilterDescriptor dw_desc(dw);
  const TensorDescriptor dy_desc(dy);
  ConvolutionDescriptor conv(g, x.dtype());
  const std::string key = problem_key("bwd_filter", g, x, dw, dy);
  const ConvAlgo& algo = conv_algo<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
      key, x.dtype(), [&](auto* results, int capacity, int* count, void* search, std::size_t search_bytes) {
        // The search writes its output, and dw accumulates: it searches with a scratch dw instead.
        const Tensor scratch = empty(dw.shape(), dw.dtype(), dw.layout());
        STOKE_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            cudnn_.native(), x_desc.get(), x.data(), dy_desc.get(), dy.data(), conv.get(), dw_desc.get(),
            scratch.data(), capacity, count, results, search, search_bytes));
      });
  conv.set_math(algo.math);
  const float one = 1.0f;  // beta = 1: dw += the gradient
  STOKE_CUDNN_CHECK(
      cudnnConvolutionBackwardFilter(cudnn_.native(), &one, x_desc.get(), x.data(), dy_desc.get(), dy.data(),
                                     conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo.algo),
                                     workspace(algo.workspace), algo.workspace, &one, dw_desc.get(), dw.data()));
  if (db.defined()) {
    accumulate_channel_sums(dy.dtype(), dy.data(), db.data(), image_dims(dy, kernel, "dy"), stream_.native());
  }
}

}  // namespace stoke::nn::cuda
