// Layer: one step of a model, with forward and backward on any Backend; and the composites that
// make models of layers (Sequential, Residual).
//
//   Context ctx{.backend = *backend, .mode = Mode::train};
//   Tensor logits = model.forward(images, ctx);        // keeps what backward needs
//   Tensor dx = model.backward(dlogits, ctx);          // parameter gradients accumulate (+=)
//   model.for_each_parameter([](const std::string& name, Parameter& p) { ... });
//
// forward() and backward() are non-virtual: they check the call (the tensor is on the backend's
// device; backward follows a forward in training mode) and then call the layer's *_impl. A layer
// is used by one thread at a time. In Mode::eval forward keeps nothing for backward and no
// gradient memory is ever allocated: that is inference mode.
//
// Mixed precision: a model computes in the dtype and layout of its input. Parameters stay f32
// (the master weights the optimizer updates); a layer fed bf16 or f16 hands the kernels a copy of
// its weights cast to that dtype each forward, and adds the half-precision weight gradients the
// kernels produce into the f32 gradients. For channels-last (NHWC) inputs the convolution
// weights are rearranged once, by to_layout(), as PyTorch's model.to(memory_format=...) does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoke/nn/backend.hpp"
#include "stoke/nn/replicas.hpp"
#include "stoke/nn/tensor.hpp"

namespace stoke::nn {

class BatchNorm2d;
class LayerProfile;

enum class Mode : std::uint8_t {
  train,  ///< batch statistics, dropout on, activations kept for backward
  eval,   ///< running statistics, dropout off, nothing kept: inference
};

/// What a forward or backward pass runs with.
struct Context {
  Backend& backend;
  Mode mode = Mode::train;
  /// Dropout's masks are a function of (seed, step, layer): the same seed gives the same run.
  std::uint64_t seed = 0;
  std::uint64_t step = 0;
  /// When set, every layer's forward and backward is timed into it (layer_profile.hpp).
  LayerProfile* profile = nullptr;
  /// When set, told after each layer's backward that its parameter gradients are final
  /// (replicas.hpp: data-parallel training sums them over the replicas meanwhile).
  GradientSync* gradient_sync = nullptr;
  /// When set in Mode::train, batch norm normalises with statistics summed over the replicas
  /// (sync batch norm) instead of this replica's batch alone.
  ReplicaSum* batch_norm_sync = nullptr;
};

/// A learnable tensor: f32 master values and their gradient (allocated by the first backward,
/// zeroed by the optimizer after each step).
struct Parameter {
  Tensor value;
  Tensor grad;
  /// Weight decay applies: true for weights, false for biases and batch-norm scales and shifts
  /// (the usual ImageNet recipe).
  bool decay = true;
};

using ParameterVisitor = std::function<void(const std::string& name, Parameter& parameter)>;
/// A tensor that is state but not learned (batch norm's running statistics).
using BufferVisitor = std::function<void(const std::string& name, Tensor& buffer)>;

class Layer {
 public:
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  /// The output for input `x`. Throws std::invalid_argument naming the layer when x's shape, dtype
  /// or device does not fit it.
  Tensor forward(const Tensor& x, Context& ctx);
  /// The gradient with respect to the last forward's input, given `dy`, the gradient with respect
  /// to its output; parameter gradients accumulate. Throws std::logic_error when no forward in
  /// Mode::train preceded it.
  Tensor backward(const Tensor& dy, Context& ctx);

  /// Calls `visit` for each parameter, named as PyTorch's state_dict would ("layer1.0.conv1.weight"
  /// under `prefix` "layer1.0.conv1").
  virtual void for_each_parameter(const ParameterVisitor& visit, const std::string& prefix = {});
  /// Calls `visit` for each buffer ("bn1.running_mean").
  virtual void for_each_buffer(const BufferVisitor& visit, const std::string& prefix = {});
  /// Moves parameters and buffers to `device` (copies enqueued on `stream`), gradients dropped.
  void to(Device device, StreamView stream = StreamView::host());
  /// Rearranges the 4-d parameters (convolution weights, {Cout, Cin/g, k, k}) into `layout`,
  /// which must be the layout of the inputs: CUDA's channels-last kernels want channels-last
  /// filters. Gradients are dropped; build the optimizer afterwards (its momentum buffers take the
  /// parameters' layout). Parameters on a GPU make a round trip through the host (once, before
  /// training).
  void to_layout(TensorLayout layout, StreamView stream = StreamView::host());
  /// The layout of the 4-d parameters, which is the layout the inputs must come in: what
  /// to_layout() last made them (NCHW for a model without 4-d parameters).
  TensorLayout layout();
  /// Frees what forward kept for backward.
  virtual void release_activations() {}

  /// One line, PyTorch's repr: "Conv2d(3, 32, kernel_size=3, stride=1, padding=1, bias=False)".
  virtual std::string describe() const = 0;

 protected:
  Layer() = default;
  virtual Tensor forward_impl(const Tensor& x, Context& ctx) = 0;
  virtual Tensor backward_impl(const Tensor& dy, Context& ctx) = 0;
  /// What forward() and backward() do around *_impl (the checks, the profile, the pairing of a
  /// backward with its forward), around `impl` instead: for a layer's own entry points that take
  /// more operands (BatchNorm2d's residual join).
  Tensor forward_as(const Tensor& x, Context& ctx, const std::function<Tensor()>& impl);
  Tensor backward_as(const Tensor& dy, Context& ctx, const std::function<Tensor()>& impl);
  /// The gradient tensor of `p`, zeros allocated on first use (f32, in p's layout).
  static const Tensor& gradient(Parameter& p, Backend& backend);
  /// p's values as the kernels take them for the input `x`: p.value itself when x is f32, else a
  /// copy cast to x's dtype. Throws std::invalid_argument naming the layer when p is 4-d in
  /// another layout than x (Layer::to_layout fixes it).
  Tensor compute_value(const Parameter& p, const Tensor& x, Backend& backend) const;

  /// Where a kernel that computes in `dtype` accumulates p's gradient: for f32 p's gradient
  /// itself; for bf16 and f16 (the kernels take one dtype per call) a zeroed scratch tensor of
  /// that dtype, whose values commit() adds into p's f32 gradient.
  class GradientTarget {
   public:
    /// A target of nothing: tensor() is undefined and commit() does nothing (a layer without bias).
    GradientTarget() = default;
    GradientTarget(Parameter& p, DType dtype, Backend& backend);
    const Tensor& tensor() const noexcept { return target_; }
    void commit();

   private:
    Parameter* parameter_ = nullptr;
    Backend* backend_ = nullptr;
    Tensor target_;
  };
  /// "prefix.name", or "name" for an empty prefix.
  static std::string join(const std::string& prefix, const std::string& name);

 private:
  bool forward_kept_ = false;  // a forward in Mode::train happened since the last backward
};

/// Layers one after the other, named "0", "1", ... or as given.
class Sequential : public Layer {
 public:
  Sequential() = default;
  /// Appends `layer` named `name` (its index when empty); returns it.
  Layer& add(std::unique_ptr<Layer> layer, std::string name = {});
  template <class L, class... Args>
  L& emplace(std::string name, Args&&... args) {
    return static_cast<L&>(add(std::make_unique<L>(std::forward<Args>(args)...), std::move(name)));
  }
  std::size_t size() const noexcept { return layers_.size(); }
  Layer& operator[](std::size_t i) const { return *layers_.at(i).second; }

  void for_each_parameter(const ParameterVisitor& visit, const std::string& prefix = {}) override;
  void for_each_buffer(const BufferVisitor& visit, const std::string& prefix = {}) override;
  void release_activations() override;
  /// One line per layer, indented, as PyTorch prints a model.
  std::string describe() const override;

  /// Forward and backward through the layers before the last one only, for a composite that runs
  /// the last one itself (Residual's join in its body's last batch norm).
  Tensor forward_head(const Tensor& x, Context& ctx);
  Tensor backward_head(const Tensor& dy, Context& ctx);

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  // Forward through layers [0, end), backward through [0, end) from end - 1 down.
  Tensor forward_layers(const Tensor& x, Context& ctx, std::size_t end);
  Tensor backward_layers(const Tensor& dy, Context& ctx, std::size_t end);

  std::vector<std::pair<std::string, std::unique_ptr<Layer>>> layers_;
};

/// y = after(body(x) + shortcut(x)): the shortcut is the identity when null, `after` too (ResNet's
/// blocks, with a ReLU after the sum). Named children: the body's layers keep their own names
/// (body is a Sequential whose names are e.g. "conv1", "bn1"), the shortcut is "downsample", as
/// torchvision names them, so a block's parameters are "layer1.0.conv1.weight" and
/// "layer1.0.downsample.0.weight".
class Residual : public Layer {
 public:
  explicit Residual(std::unique_ptr<Sequential> body, std::unique_ptr<Sequential> shortcut = nullptr,
                    std::unique_ptr<Layer> after = nullptr);
  /// y = max(bn(head(x)) + shortcut(x), 0), where bn is the body's last layer, a BatchNorm2d with
  /// its ReLU fused (BatchNorm2dOptions::relu), and head the layers before it: the function of
  /// Residual(body, shortcut, ReLU) with that ReLU off, but the sum and the ReLU made in the batch
  /// norm's pass (its two-operand forward). Throws std::invalid_argument when the body does not
  /// end in such a batch norm.
  static std::unique_ptr<Residual> joined(std::unique_ptr<Sequential> body,
                                          std::unique_ptr<Sequential> shortcut = nullptr);

  void for_each_parameter(const ParameterVisitor& visit, const std::string& prefix = {}) override;
  void for_each_buffer(const BufferVisitor& visit, const std::string& prefix = {}) override;
  void release_activations() override;
  std::string describe() const override;

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  std::unique_ptr<Sequential> body_;
  std::unique_ptr<Sequential> shortcut_;
  std::unique_ptr<Layer> after_;
  BatchNorm2d* join_ = nullptr;  // joined(): the body's last layer, which adds the shortcut
};

}  // namespace stoke::nn
