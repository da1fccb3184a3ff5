// Pooling: MaxPool2d (square windows, stride, padding) and global average pooling, which turns
// {N, C, H, W} into {N, C}.
#pragma once

#include "stoke/nn/layer.hpp"

namespace stoke::nn {

class MaxPool2d : public Layer {
 public:
  /// Throws std::invalid_argument for a kernel or stride below 1, or padding outside
  /// [0, kernel / 2] (PyTorch's limit).
  explicit MaxPool2d(const Pool2dGeometry& geometry);
  const Pool2dGeometry& geometry() const noexcept { return geometry_; }
  void release_activations() override;
  std::string describe() const override;

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  Pool2dGeometry geometry_;
  Tensor input_;
  Tensor output_;
};

/// The mean over H and W of each channel: {N, C, H, W} -> {N, C} (PyTorch's AdaptiveAvgPool2d(1)
/// followed by flatten(1)).
class GlobalAvgPool : public Layer {
 public:
  GlobalAvgPool() = default;
  void release_activations() override { input_shape_.clear(); }
  std::string describe() const override { return "GlobalAvgPool()"; }

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  Shape input_shape_;
  TensorLayout input_layout_ = TensorLayout::nchw;
};

}  // namespace stoke::nn
