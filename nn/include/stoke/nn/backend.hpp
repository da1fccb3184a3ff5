// Backend: the kernels of nn/ on one device and stream. Layers (conv2d.hpp, ...) check shapes,
// own parameters and keep what backward needs; a backend only computes, and knows nothing of
// layers or models (the split DALI makes between operators and kernels).
//
//   std::unique_ptr<Backend> cpu = make_backend(Device::cpu());               // the reference
//   std::unique_ptr<Backend> gpu = make_backend(Device::cuda(0), stream);     // cuDNN + cuBLAS
//
// Two implementations: CpuBackend (f32, NCHW; im2col + OpenBLAS, threaded with oneTBB) is the
// reference every CUDA kernel is checked against; CudaBackend (f32, bf16, f16; NCHW and NHWC;
// cuDNN, cuBLAS and plain kernels) enqueues everything on its stream and returns at once.
//
// Conventions of every kernel:
// - Tensors are on the backend's device; shapes are as documented and were checked by the layer.
// - Outputs are written, never read, unless the kernel says it accumulates ("+="): the gradients
//   of parameters accumulate, so several backward passes sum into them (gradient accumulation)
//   until the optimizer zeroes them.
// - An undefined Tensor() for an optional argument (a bias, an input gradient nobody needs)
//   means "none".
// - A backend is used by one thread at a time.
// - CpuBackend threads its kernels with oneTBB in the caller's task arena and isolates its own
//   parallel loops (tbb::this_task_arena::isolate): a kernel called from inside a pipeline's task
//   (a graph stage that runs a training step) never picks up an unrelated task while it waits for
//   its loop, so callers need no isolation of their own. How a loop is cut into chunks depends
//   on the sizes and the machine's core count, never on how many threads happen to run, so
//   results are the same bit for bit whatever the load.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "stoke/nn/device.hpp"
#include "stoke/nn/tensor.hpp"

namespace stoke::nn {

/// A 2-d convolution's hyper-parameters (square kernels, strides, padding and dilation).
struct Conv2dGeometry {
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  int kernel = 1;
  int stride = 1;
  int padding = 0;
  int dilation = 1;
  int groups = 1;  ///< in_channels and out_channels both divisible; == in_channels: depthwise

  /// The output's height (or width) for an input's: (in + 2p - d(k - 1) - 1) / s + 1.
  constexpr std::int64_t output_size(std::int64_t input) const noexcept {
    return (input + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
  }
  /// {out_channels, in_channels / groups, kernel, kernel}, PyTorch's order.
  Shape weight_shape() const { return {out_channels, in_channels / groups, kernel, kernel}; }
};

/// A 2-d max pooling window (square).
struct Pool2dGeometry {
  int kernel = 2;
  int stride = 2;
  int padding = 0;  ///< padded cells never win the max

  constexpr std::int64_t output_size(std::int64_t input) const noexcept {
    return (input + 2 * padding - kernel) / stride + 1;
  }
};

/// The fp16 loss scaler's state, kept on the backend's device so that a step never waits for it
/// (PyTorch's GradScaler keeps the same in device tensors): an f32 {size} tensor, indexed by these.
struct LossScaleState {
  static constexpr std::int64_t scale = 0;       ///< the loss scale
  static constexpr std::int64_t good_steps = 1;  ///< steps without an overflow since it last changed
  static constexpr std::int64_t skipped = 2;     ///< steps skipped for an overflow, in all
  static constexpr std::int64_t found_inf = 3;   ///< 1 when this step's gradients overflowed, else 0
  static constexpr std::int64_t size = 4;
};

/// One SGD update of one parameter, PyTorch's torch.optim.SGD (dampening 0):
///   g = grad * grad_scale + weight_decay * param
///   momentum_buffer = momentum * momentum_buffer + g
///   step = nesterov ? g + momentum * momentum_buffer : momentum_buffer   (g when momentum == 0)
///   param -= lr * step
struct SgdStep {
  float lr = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 0;
  bool nesterov = false;
  float grad_scale = 1;  ///< e.g. 1 / accumulation steps, or 1 / loss scale
  /// A LossScaleState on the device, or undefined: when given, the update changes nothing if its
  /// found_inf is set, and otherwise takes g = grad * grad_scale / its scale + weight_decay * param.
  Tensor loss_scale{};
};

/// One AdamW update of one parameter, PyTorch's torch.optim.AdamW (amsgrad off), step t >= 1:
///   g = grad * grad_scale
///   param *= 1 - lr * weight_decay                       (decoupled weight decay)
///   exp_avg    = beta1 * exp_avg    + (1 - beta1) * g
///   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
///   param -= lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
/// The bias corrections are computed in double on the host; the elements in f32.
struct AdamWStep {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;  ///< this parameter's: 0 where Parameter::decay is not set
  float grad_scale = 1;    ///< e.g. 1 / accumulation steps, or 1 / loss scale
  std::int64_t step = 1;   ///< this update's number t, from 1 (the bias corrections' exponent)
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  /// Where the kernels run, and the stream they are enqueued on (the host stream for the CPU).
  virtual Device device() const noexcept = 0;
  virtual StreamView stream() const noexcept = 0;
  /// "cpu (OpenBLAS, 2 threads)", "cuda:0 NVIDIA H200 (cuDNN 9.x, cuBLAS 13.x)".
  virtual std::string describe() const = 0;
  /// True when the kernels compute in `dtype` with images in `layout`. The base answers for f32
  /// NCHW only; the CpuBackend takes f32 in both layouts (NHWC through NCHW copies), CudaBackend
  /// f32, bf16 and f16 in NCHW and NHWC.
  virtual bool supports(DType dtype, TensorLayout layout) const noexcept;
  /// The layout this backend computes `dtype` fastest in: NCHW in the base (and on the CPU, whose
  /// kernels are NCHW ones); NHWC for bf16 and f16 on CUDA, where the tensor cores want
  /// channels-last. What `--channels-last auto` picks.
  virtual TensorLayout preferred_layout(DType dtype) const noexcept;

  /// Uninitialised memory on the device for a tensor (pooled on CUDA, so a training step
  /// allocates nothing from the driver once the shapes are known).
  virtual Tensor empty(Shape shape, DType dtype = DType::f32, TensorLayout layout = TensorLayout::nchw) = 0;
  /// A tensor of zeros (empty() + zero()).
  Tensor zeros(Shape shape, DType dtype = DType::f32, TensorLayout layout = TensorLayout::nchw);

  // ---- convolution. x {N, Cin, H, W}; w geometry.weight_shape(); b {Cout} or none;
  //      y and dy {N, Cout, Ho, Wo}.
  /// y = conv(x, w) + b.
  virtual void conv2d_forward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                              const Tensor& y) = 0;
  /// dx = the gradient of conv(x, w) with respect to x, given dy.
  virtual void conv2d_backward_data(const Conv2dGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) = 0;
  /// dw += the gradient with respect to w; db += the sum of dy over N, H, W (when db is given).
  virtual void conv2d_backward_filter(const Conv2dGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                                      const Tensor& db) = 0;

  // ---- linear. x {N, in}; w {out, in}; b {out} or none; y and dy {N, out}.
  /// y = x w^T + b.
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) = 0;
  /// dx = dy w (when dx is given); dw += dy^T x; db += the sum of dy over N (when db is given).
  virtual void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                               const Tensor& db) = 0;

  // ---- batch normalisation over N, H, W per channel. x, y, dx, dy {N, C, H, W}; the rest {C}, f32.
  /// Normalises with the batch's statistics; saves the mean and 1/sqrt(biased var + eps) for
  /// backward; running = (1 - momentum) running + momentum batch, with the unbiased variance.
  virtual void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           const Tensor& running_mean, const Tensor& running_var, double momentum,
                                           double eps, const Tensor& y, const Tensor& saved_mean,
                                           const Tensor& saved_invstd) = 0;
  /// Normalises with the running statistics.
  virtual void batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                            const Tensor& running_mean, const Tensor& running_var, double eps,
                                            const Tensor& y) = 0;
  /// dx = the gradient with respect to x (batch statistics); dgamma += ...; dbeta += ....
  virtual void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                                   const Tensor& saved_invstd, const Tensor& dx, const Tensor& dgamma,
                                   const Tensor& dbeta) = 0;
  /// batch_norm_forward_training, then y = max(y + residual, 0), or max(y, 0) when residual is
  /// undefined (residual: x's shape, dtype and layout): ResNet's BN -> ReLU and BN -> add -> ReLU.
  /// The base composes the three kernels; CUDA runs them as one pass over channels-last images,
  /// rounding once (the composition rounds a half-precision y at each step).
  virtual void batch_norm_relu_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                                const Tensor& running_mean, const Tensor& running_var, double momentum,
                                                double eps, const Tensor& residual, const Tensor& y,
                                                const Tensor& saved_mean, const Tensor& saved_invstd);
  /// Its gradients, from its output y: dz = y > 0 ? dy : 0; dresidual = dz (when given); then
  /// batch_norm_backward of dz. The base composes relu_backward and batch_norm_backward; CUDA masks
  /// dy as it reads it, channels-last.
  virtual void batch_norm_relu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                                        const Tensor& saved_mean, const Tensor& saved_invstd, const Tensor& dx,
                                        const Tensor& dresidual, const Tensor& dgamma, const Tensor& dbeta);

  // ---- elementwise (any shape; y may be x itself, dx may be dy itself)
  /// y = max(x, 0).
  virtual void relu_forward(const Tensor& x, const Tensor& y) = 0;
  /// dx = y > 0 ? dy : 0, from relu's output y.
  virtual void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) = 0;
  /// y = a + b (y may be a or b).
  virtual void add(const Tensor& a, const Tensor& b, const Tensor& y) = 0;
  /// Keeps each element with probability 1 - p, scaled by 1 / (1 - p): mask (u8, x's shape)
  /// gets 1 where kept. The mask is a function of (seed, element index) only, the same on every
  /// backend (src/nn/dropout_mask.hpp).
  virtual void dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask, const Tensor& y) = 0;
  /// dx = dy * mask / (1 - p).
  virtual void dropout_backward(const Tensor& dy, const Tensor& mask, float p, const Tensor& dx) = 0;

  // ---- pooling. x, dx {N, C, H, W}; y, dy {N, C, Ho, Wo}.
  virtual void max_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y) = 0;
  /// dx = dy routed to the first maximum of each window (windows may overlap: contributions sum).
  virtual void max_pool2d_backward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                                   const Tensor& dx) = 0;
  /// y {N, C} = the mean of x over H and W.
  virtual void global_avg_pool_forward(const Tensor& x, const Tensor& y) = 0;
  /// dx = dy / (H W), broadcast over H and W.
  virtual void global_avg_pool_backward(const Tensor& dy, const Tensor& dx) = 0;

  // ---- loss. logits and dlogits {N, K}.
  /// The softmax cross-entropy of each row against its label (labels {N} i32 in [0, K)) smoothed
  /// by `smoothing`: the target is (1 - smoothing) one-hot + smoothing / K, as in
  /// torch.nn.CrossEntropyLoss(label_smoothing). stats {2} f32 gets {the mean loss over the rows,
  /// the rows whose largest logit is the label}; dlogits (when given) = grad_scale * the gradient
  /// of the mean loss. A label outside [0, K): the CPU throws std::out_of_range naming the row; on
  /// CUDA (which cannot throw from the stream) that row's loss and gradient are NaN, so the mean
  /// loss reads NaN.
  virtual void softmax_cross_entropy(const Tensor& logits, const Tensor& labels, float smoothing, float grad_scale,
                                     const Tensor& stats, const Tensor& dlogits) = 0;

  /// The binary cross-entropy of each logit against its target, torch.nn.BCEWithLogitsLoss with
  /// the mean over all N K elements: targets {N, K} f32 (in [0, 1], not checked, as torch does
  /// not); pos_weight {K} f32 (the weight of each class's positive term) or none. Per element,
  /// stable for any logit x (softplus(-x) = log1p(exp(-|x|)) + max(-x, 0)):
  ///   loss = (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)
  /// stats {2} f32 gets {the mean loss, the rows whose every prediction (x > 0) equals its target
  /// (t > 0.5)}; dlogits (when given) = grad_scale * the gradient of the mean loss.
  virtual void binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& pos_weight,
                                                float grad_scale, const Tensor& stats, const Tensor& dlogits) = 0;

  // ---- optimizer and precision. All tensors of one call have the same element count.
  /// One SGD step of param (f32) given grad (f32) and momentum_buffer (f32; unused when
  /// step.momentum == 0).
  virtual void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                          const SgdStep& step) = 0;
  /// One AdamW step of param (f32) given grad, exp_avg and exp_avg_sq (f32, updated in place).
  virtual void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                            const AdamWStep& step) = 0;
  /// dst = src converted to dst's dtype (f32, bf16, f16; rounding to nearest even).
  virtual void cast(const Tensor& src, const Tensor& dst) = 0;
  /// False when any element of x is infinite or NaN (f32, bf16, f16). Waits for the stream.
  virtual bool all_finite(const Tensor& x) = 0;
  /// True when every element of every tensor is finite: one wait for the stream, not one per
  /// tensor (the fp16 loss scaler's overflow check of all gradients). The base calls the
  /// one-tensor form for each.
  virtual bool all_finite_in(std::span<const Tensor> xs);
  /// x *= alpha.
  virtual void scale(const Tensor& x, float alpha) = 0;

  // ---- the fp16 loss scaler on the device (state: a LossScaleState). CUDA enqueues these without
  //      a wait for the stream; the base computes them on the host (reading the state waits).
  /// x (f32) *= state's scale: the loss gradient, scaled before it is rounded to f16.
  virtual void multiply_by_loss_scale(const Tensor& x, const Tensor& state);
  /// state's found_inf = 1 when any element of xs (f32, bf16, f16) is infinite or NaN, else 0.
  virtual void find_non_finite(std::span<const Tensor> xs, const Tensor& state);
  /// After a step, PyTorch's _amp_update_scale_: with found_inf set, scale *= backoff, good_steps
  /// = 0 and skipped += 1; else good_steps += 1, and when it reaches growth_interval, scale *=
  /// growth and good_steps = 0.
  virtual void update_loss_scale(const Tensor& state, float growth, float backoff, int growth_interval);

 protected:
  Backend() = default;
};

/// The backend of `device`: a CpuBackend for the CPU; for a CUDA device a CudaBackend whose
/// kernels run on `stream` (a stream of that device, which must outlive the backend). Throws
/// DeviceError for a CUDA device in a build without CUDA or for a stream of another device.
std::unique_ptr<Backend> make_backend(Device device, StreamView stream = StreamView::host());

}  // namespace stoke::nn
