#include "stoke/nn/layer.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "stoke/nn/batch_norm.hpp"
#include "stoke/nn/layer_profile.hpp"

namespace stoke::nn {

Tensor Layer::forward(const Tensor& x, Context& ctx) {
  return forward_as(x, ctx, [&] { return forward_impl(x, ctx); });
}

Tensor Layer::backward(const Tensor& dy, Context& ctx) {
  return backward_as(dy, ctx, [&] { return backward_impl(dy, ctx); });
}

Tensor Layer::forward_as(const Tensor& x, Context& ctx, const std::function<Tensor()>& impl) {
  if (!x.defined()) throw std::invalid_argument(describe() + ": forward of an undefined tensor");
  if (x.device() != ctx.backend.device()) {
    throw std::invalid_argument(describe() + ": the input " + x.describe() + " is not on the backend's device " +
                                ctx.backend.device().str() + " (copy it with Tensor::to first)");
  }
  if (ctx.profile != nullptr) ctx.profile->begin(LayerProfile::kind_of(describe()), LayerProfile::Pass::forward,
                                                 ctx.backend.stream());
  Tensor y = impl();
  if (ctx.profile != nullptr) ctx.profile->end(ctx.backend.stream());
  forward_kept_ = ctx.mode == Mode::train;
  return y;
}

Tensor Layer::backward_as(const Tensor& dy, Context& ctx, const std::function<Tensor()>& impl) {
  if (!forward_kept_) {
    throw std::logic_error(describe() +
                           ": backward without a forward in Mode::train before it (in Mode::eval "
                           "nothing is kept for backward)");
  }
  if (dy.device() != ctx.backend.device()) {
    throw std::invalid_argument(describe() + ": the gradient " + dy.describe() + " is not on the backend's device " +
                                ctx.backend.device().str());
  }
  forward_kept_ = false;
  Tensor dx;
  if (ctx.profile == nullptr) {
    dx = impl();
  } else {
    ctx.profile->begin(LayerProfile::kind_of(describe()), LayerProfile::Pass::backward, ctx.backend.stream());
    dx = impl();
    ctx.profile->end(ctx.backend.stream());
  }
  if (ctx.gradient_sync != nullptr) ctx.gradient_sync->ready(*this);
  return dx;
}

void Layer::for_each_parameter(const ParameterVisitor& /*visit*/, const std::string& /*prefix*/) {}
void Layer::for_each_buffer(const BufferVisitor& /*visit*/, const std::string& /*prefix*/) {}

void Layer::to(Device device, StreamView stream) {
  for_each_parameter([&](const std::string&, Parameter& p) {
    if (p.value.device() != device) p.value = p.value.to(device, stream);
    p.grad = {};
  });
  for_each_buffer([&](const std::string&, Tensor& buffer) {
    if (buffer.device() != device) buffer = buffer.to(device, stream);
  });
  release_activations();
  forward_kept_ = false;
}

void Layer::to_layout(TensorLayout layout, StreamView stream) {
  for_each_parameter([&](const std::string&, Parameter& p) {
    p.grad = {};
    if (p.value.rank() != 4 || p.value.layout() == layout) return;
    const Device device = p.value.device();
    const Tensor host = device.is_cpu() ? p.value : p.value.to(Device::cpu(), stream);
    stream.synchronize();  // the host reads the copy next
    p.value = nn::to_layout(host, layout).to(device, stream);
  });
  release_activations();
  forward_kept_ = false;
}

TensorLayout Layer::layout() {
  std::optional<TensorLayout> found;
  for_each_parameter([&](const std::string&, Parameter& p) {
    if (!found && p.value.rank() == 4) found = p.value.layout();
  });
  return found.value_or(TensorLayout::nchw);
}

const Tensor& Layer::gradient(Parameter& p, Backend& backend) {
  if (!p.grad.defined() || p.grad.device() != backend.device()) {
    p.grad = backend.zeros(p.value.shape(), DType::f32, p.value.layout());
  }
  return p.grad;
}

Tensor Layer::compute_value(const Parameter& p, const Tensor& x, Backend& backend) const {
  if (p.value.rank() == 4 && x.rank() == 4 && p.value.layout() != x.layout()) {
    const std::string layout(to_string(x.layout()));
    throw std::invalid_argument(describe() + ": the input " + x.describe() + " is " + layout + " but the weights " +
                                p.value.describe() + " are not; rearrange the model's weights first with " +
                                "model.to_layout(TensorLayout::" + layout + ")");
  }
  if (x.dtype() == p.value.dtype()) return p.value;
  Tensor copy = backend.empty(p.value.shape(), x.dtype(), p.value.layout());
  backend.cast(p.value, copy);
  return copy;
}

Layer::GradientTarget::GradientTarget(Parameter& p, DType dtype, Backend& backend)
    : parameter_(&p), backend_(&backend) {
  const Tensor& grad = gradient(p, backend);
  target_ = dtype == grad.dtype() ? grad : backend.zeros(grad.shape(), dtype, grad.layout());
}

void Layer::GradientTarget::commit() {
  if (parameter_ == nullptr || target_.data() == parameter_->grad.data()) return;
  Tensor widened = backend_->empty(target_.shape(), DType::f32, target_.layout());
  backend_->cast(target_, widened);
  backend_->add(parameter_->grad, widened, parameter_->grad);
  target_ = {};
}

std::string Layer::join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// ---- Sequential

Layer& Sequential::add(std::unique_ptr<Layer> layer, std::string name) {
  if (!layer) throw std::invalid_argument("Sequential::add: a null layer");
  if (name.empty()) name = std::to_string(layers_.size());
  for (const auto& [existing, _] : layers_) {
    if (existing == name) throw std::invalid_argument("Sequential::add: a layer named '" + name + "' is already there");
  }
  layers_.emplace_back(std::move(name), std::move(layer));
  return *layers_.back().second;
}

Tensor Sequential::forward_impl(const Tensor& x, Context& ctx) { return forward_layers(x, ctx, layers_.size()); }

Tensor Sequential::backward_impl(const Tensor& dy, Context& ctx) { return backward_layers(dy, ctx, layers_.size()); }

Tensor Sequential::forward_head(const Tensor& x, Context& ctx) {
  return forward_layers(x, ctx, layers_.empty() ? 0 : layers_.size() - 1);
}

Tensor Sequential::backward_head(const Tensor& dy, Context& ctx) {
  return backward_layers(dy, ctx, layers_.empty() ? 0 : layers_.size() - 1);
}

Tensor Sequential::forward_layers(const Tensor& x, Context& ctx, std::size_t end) {
  Tensor y = x;
  for (std::size_t i = 0; i < end; ++i) y = layers_[i].second->forward(y, ctx);
  return y;
}

Tensor Sequential::backward_layers(const Tensor& dy, Context& ctx, std::size_t end) {
  Tensor dx = dy;
  for (std::size_t i = end; i-- > 0;) dx = layers_[i].second->backward(dx, ctx);
  return dx;
}

void Sequential::for_each_parameter(const ParameterVisitor& visit, const std::string& prefix) {
  for (auto& [name, layer] : layers_) layer->for_each_parameter(visit, join(prefix, name));
}

void Sequential::for_each_buffer(const BufferVisitor& visit, const std::string& prefix) {
  for (auto& [name, layer] : layers_) layer->for_each_buffer(visit, join(prefix, name));
}

void Sequential::release_activations() {
  for (auto& [_, layer] : layers_) layer->release_activations();
}

std::string Sequential::describe() const {
  std::string text = "Sequential(\n";
  for (const auto& [name, layer] : layers_) {
    std::string inner = layer->describe();
    // Indent the child's own lines under its name.
    for (std::size_t at = inner.find('\n'); at != std::string::npos; at = inner.find('\n', at + 3)) {
      inner.insert(at + 1, "  ");
    }
    text += "  (" + name + "): " + inner + "\n";
  }
  return text + ")";
}

// ---- Residual

Residual::Residual(std::unique_ptr<Sequential> body, std::unique_ptr<Sequential> shortcut, std::unique_ptr<Layer> after)
    : body_(std::move(body)), shortcut_(std::move(shortcut)), after_(std::move(after)) {
  if (!body_) throw std::invalid_argument("Residual: a null body");
}

std::unique_ptr<Residual> Residual::joined(std::unique_ptr<Sequential> body, std::unique_ptr<Sequential> shortcut) {
  auto* join = body && body->size() > 0 ? dynamic_cast<BatchNorm2d*>(&(*body)[body->size() - 1]) : nullptr;
  if (join == nullptr || !join->options().relu) {
    throw std::invalid_argument(
        "Residual::joined: the body must end in a BatchNorm2d with its ReLU fused (BatchNorm2dOptions::relu)");
  }
  auto block = std::make_unique<Residual>(std::move(body), std::move(shortcut));
  block->join_ = join;
  return block;
}

Tensor Residual::forward_impl(const Tensor& x, Context& ctx) {
  if (join_ != nullptr) {
    const Tensor skip = shortcut_ ? shortcut_->forward(x, ctx) : x;
    return join_->forward(body_->forward_head(x, ctx), skip, ctx);
  }
  const Tensor main = body_->forward(x, ctx);
  const Tensor skip = shortcut_ ? shortcut_->forward(x, ctx) : x;
  if (main.shape() != skip.shape()) {
    throw std::invalid_argument("Residual: the body gives " + to_string(main.shape()) + " but the shortcut " +
                                to_string(skip.shape()) + " (a block that changes the shape needs a downsample)");
  }
  Tensor y = ctx.backend.empty(main.shape(), main.dtype(), main.layout());
  ctx.backend.add(main, skip, y);
  return after_ ? after_->forward(y, ctx) : y;
}

Tensor Residual::backward_impl(const Tensor& dy_after, Context& ctx) {
  if (join_ != nullptr) {
    Tensor dskip;
    Tensor dx = body_->backward_head(join_->backward(dy_after, ctx, dskip), ctx);
    if (shortcut_) dskip = shortcut_->backward(dskip, ctx);
    ctx.backend.add(dx, dskip, dx);
    return dx;
  }
  const Tensor dy = after_ ? after_->backward(dy_after, ctx) : dy_after;
  // The sum passes dy to both branches unchanged; their input gradients add up.
  Tensor dx = body_->backward(dy, ctx);
  const Tensor dskip = shortcut_ ? shortcut_->backward(dy, ctx) : dy;
  ctx.backend.add(dx, dskip, dx);
  return dx;
}

void Residual::for_each_parameter(const ParameterVisitor& visit, const std::string& prefix) {
  body_->for_each_parameter(visit, prefix);
  if (shortcut_) shortcut_->for_each_parameter(visit, join(prefix, "downsample"));
}

void Residual::for_each_buffer(const BufferVisitor& visit, const std::string& prefix) {
  body_->for_each_buffer(visit, prefix);
  if (shortcut_) shortcut_->for_each_buffer(visit, join(prefix, "downsample"));
}

void Residual::release_activations() {
  body_->release_activations();
  if (shortcut_) shortcut_->release_activations();
  if (after_) after_->release_activations();
}

std::string Residual::describe() const {
  std::string text = "Residual(body=" + body_->describe();
  if (shortcut_) text += ", downsample=" + shortcut_->describe();
  if (after_) text += ", after=" + after_->describe();
  if (join_ != nullptr) text += ", joined in its last batch norm";
  return text + ")";
}

}  // namespace stoke::nn
