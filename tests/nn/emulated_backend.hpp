// A test double of a GPU backend on the CPU: it takes bf16 and f16 tensors and channels-last
// (NHWC) images as CudaBackend does, and computes as tensor cores do (f32 arithmetic on
// half-precision storage). Each kernel widens its half-precision and NHWC arguments into f32 NCHW
// copies, lets the CpuBackend compute, and rounds the outputs back into their dtype and layout.
//
// It lets the mixed-precision and channels-last paths above the kernels -- the layers' weight
// casts and gradient accumulation, the Trainer's loss scaling, Layer::to_layout -- be tested on a
// machine without a GPU. The CUDA kernels themselves are checked against the CpuBackend in
// cuda_backend_gpu_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <vector>

namespace stoke::nn::testing {

class EmulatedBackend : public Backend {
 public:
  Device device() const noexcept override { return Device::cpu(); }
  StreamView stream() const noexcept override { return StreamView::host(); }
  std::string describe() const override { return "emulated half precision and NHWC on " + cpu_->describe(); }
  bool supports(DType dtype, TensorLayout /*layout*/) const noexcept override {
    return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16;
  }
  Tensor empty(Shape shape, DType dtype, TensorLayout layout) override {
    return Tensor(std::move(shape), dtype, Device::cpu(), layout);
  }

  void conv2d_forward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                      const Tensor& y) override {
    Out out_y(*this, y, false);
    cpu_->conv2d_forward(g, in(x), in(w), in(b), out_y.work);
  }
  void conv2d_backward_data(const Conv2dGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) override {
    Out out_dx(*this, dx, false);
    cpu_->conv2d_backward_data(g, in(dy), in(w), out_dx.work);
  }
  void conv2d_backward_filter(const Conv2dGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                              const Tensor& db) override {
    Out out_dw(*this, dw, true);
    Out out_db(*this, db, true);
    cpu_->conv2d_backward_filter(g, in(x), in(dy), out_dw.work, out_db.work);
  }

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) override {
    Out out_y(*this, y, false);
    cpu_->linear_forward(in(x), in(w), in(b), out_y.work);
  }
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                       const Tensor& db) override {
    Out out_dx(*this, dx, false);
    Out out_dw(*this, dw, true);
    Out out_db(*this, db, true);
    cpu_->linear_backward(in(x), in(w), in(dy), out_dx.work, out_dw.work, out_db.work);
  }

  void batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                                   const Tensor& running_var, double momentum, double eps, const Tensor& y,
                                   const Tensor& saved_mean, const Tensor& saved_invstd) override {
    Out out_y(*this, y, false);
    cpu_->batch_norm_forward_training(in(x), gamma, beta, running_mean, running_var, momentum, eps, out_y.work,
                                      saved_mean, saved_invstd);
  }
  void batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    const Tensor& running_mean, const Tensor& running_var, double eps,
                                    const Tensor& y) override {
    Out out_y(*this, y, false);
    cpu_->batch_norm_forward_inference(in(x), gamma, beta, running_mean, running_var, eps, out_y.work);
  }
  void batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                           const Tensor& saved_invstd, const Tensor& dx, const Tensor& dgamma,
                           const Tensor& dbeta) override {
    Out out_dx(*this, dx, false);
    cpu_->batch_norm_backward(in(x), in(dy), gamma, saved_mean, saved_invstd, out_dx.work, dgamma, dbeta);
  }

  void relu_forward(const Tensor& x, const Tensor& y) override {
    Out out_y(*this, y, false);
    cpu_->relu_forward(in(x), out_y.work);
  }
  void relu_backward(const Tensor& y, const Tensor& dy, const Tensor& dx) override {
    Out out_dx(*this, dx, false);
    cpu_->relu_backward(in(y), in(dy), out_dx.work);
  }
  void add(const Tensor& a, const Tensor& b, const Tensor& y) override {
    Out out_y(*this, y, false);
    cpu_->add(in(a), in(b), out_y.work);
  }
  void dropout_forward(const Tensor& x, float p, std::uint64_t seed, const Tensor& mask, const Tensor& y) override {
    require_planar(x, "dropout_forward");  // the mask follows memory order
    Out out_y(*this, y, false);
    cpu_->dropout_forward(in(x), p, seed, mask, out_y.work);
  }
  void dropout_backward(const Tensor& dy, const Tensor& mask, float p, const Tensor& dx) override {
    require_planar(dy, "dropout_backward");
    Out out_dx(*this, dx, false);
    cpu_->dropout_backward(in(dy), mask, p, out_dx.work);
  }

  void max_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y) override {
    Out out_y(*this, y, false);
    cpu_->max_pool2d_forward(g, in(x), out_y.work);
  }
  void max_pool2d_backward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                           const Tensor& dx) override {
    Out out_dx(*this, dx, false);
    cpu_->max_pool2d_backward(g, in(x), in(y), in(dy), out_dx.work);
  }
  void global_avg_pool_forward(const Tensor& x, const Tensor& y) override {
    Out out_y(*this, y, false);
    cpu_->global_avg_pool_forward(in(x), out_y.work);
  }
  void global_avg_pool_backward(const Tensor& dy, const Tensor& dx) override {
    Out out_dx(*this, dx, false);
    cpu_->global_avg_pool_backward(in(dy), out_dx.work);
  }

  void softmax_cross_entropy(const Tensor& logits, const Tensor& labels, float smoothing, float grad_scale,
                             const Tensor& stats, const Tensor& dlogits) override {
    Out out_dlogits(*this, dlogits, false);
    cpu_->softmax_cross_entropy(in(logits), labels, smoothing, grad_scale, stats, out_dlogits.work);
  }
  void binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& targets, const Tensor& pos_weight,
                                        float grad_scale, const Tensor& stats, const Tensor& dlogits) override {
    Out out_dlogits(*this, dlogits, false);
    cpu_->binary_cross_entropy_with_logits(in(logits), targets, pos_weight, grad_scale, stats, out_dlogits.work);
  }

  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                  const SgdStep& step) override {
    Out out_param(*this, param, true);
    Out out_buffer(*this, momentum_buffer, true);
    cpu_->sgd_update(out_param.work, in(grad), out_buffer.work, step);
  }
  void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const AdamWStep& step) override {
    Out out_param(*this, param, true);
    Out out_exp_avg(*this, exp_avg, true);
    Out out_exp_avg_sq(*this, exp_avg_sq, true);
    cpu_->adamw_update(out_param.work, in(grad), out_exp_avg.work, out_exp_avg_sq.work, step);
  }
  void cast(const Tensor& src, const Tensor& dst) override { cpu_->cast(src, dst); }
  bool all_finite(const Tensor& x) override { return cpu_->all_finite(x); }
  void scale(const Tensor& x, float alpha) override {
    Out out_x(*this, x, true);
    cpu_->scale(out_x.work, alpha);
  }

  /// Kernel calls that got a bf16/f16 or NHWC argument (to see that the emulation was used).
  std::int64_t converted_calls() const noexcept { return converted_calls_; }

 private:
  static bool planar_f32(const Tensor& t) {
    return t.dtype() == DType::f32 && (t.rank() != 4 || t.layout() == TensorLayout::nchw);
  }
  static bool is_half(const Tensor& t) { return t.dtype() == DType::bf16 || t.dtype() == DType::f16; }
  static void require_planar(const Tensor& t, const char* kernel) {
    if (t.rank() == 4 && t.layout() == TensorLayout::nhwc) {
      throw std::invalid_argument(std::string("EmulatedBackend::") + kernel + ": NHWC is not emulated here");
    }
  }

  /// `t` as the CpuBackend takes it: itself when f32 NCHW (or not floating point: labels, masks),
  /// else an f32 NCHW copy.
  Tensor in(const Tensor& t) {
    if (!t.defined() || planar_f32(t) || !(is_half(t) || t.dtype() == DType::f32)) return t;
    ++converted_calls_;
    Tensor wide(t.shape(), DType::f32, Device::cpu(), t.layout());
    cpu_->cast(t, wide);
    return t.rank() == 4 && t.layout() == TensorLayout::nhwc ? to_layout(wide, TensorLayout::nchw) : wide;
  }

  /// An output argument: `work` is what the CpuBackend writes (the tensor itself when f32 NCHW,
  /// else an f32 NCHW copy, holding the old values when the kernel accumulates); the destructor
  /// rounds it back into the tensor's dtype and layout.
  struct Out {
    Out(EmulatedBackend& backend, const Tensor& t, bool accumulates) : self(backend), target(t) {
      if (!t.defined() || planar_f32(t)) {
        work = t;
      } else {
        work = accumulates ? self.in(t) : Tensor(t.shape(), DType::f32, Device::cpu(), TensorLayout::nchw);
      }
    }
    ~Out() {
      if (!work.defined() || work.data() == target.data()) return;
      const bool nhwc = target.rank() == 4 && target.layout() == TensorLayout::nhwc;
      self.cpu_->cast(nhwc ? to_layout(work, TensorLayout::nhwc) : work, target);
    }
    Out(const Out&) = delete;
    Out& operator=(const Out&) = delete;

    EmulatedBackend& self;
    Tensor target;
    Tensor work;
  };

  std::unique_ptr<Backend> cpu_ = make_backend(Device::cpu());
  std::int64_t converted_calls_ = 0;
};

}  // namespace stoke::nn::testing
