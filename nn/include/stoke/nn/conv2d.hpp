// Conv2d: a 2-d convolution with stride, padding, dilation and groups (groups == channels makes
// it depthwise, for MobileNet's depthwise-separable blocks), with an optional bias.
//
//   Conv2d conv({.in_channels = 3, .out_channels = 32, .kernel = 3, .padding = 1});
//   Tensor y = conv.forward(x, ctx);   // x {N, 3, H, W} -> y {N, 32, H, W}
#pragma once

#include <cstdint>

#include "stoke/nn/weighted_layer.hpp"

namespace stoke::nn {

struct Conv2dOptions {
  std::int64_t in_channels = 0;
  std::int64_t out_channels = 0;
  int kernel = 3;
  int stride = 1;
  int padding = 0;
  int dilation = 1;
  int groups = 1;
  bool bias = false;
  /// The weights are drawn from N(0, 2 / (out_channels / groups * kernel^2)) (He's init, fan_out,
  /// as torchvision's ResNets), a function of this seed only; a bias starts at zero.
  std::uint64_t seed = 0;
};

/// Its weight is {out_channels, in_channels / groups, kernel, kernel}; its bias {out_channels}.
class Conv2d : public WeightedLayer {
 public:
  /// Throws std::invalid_argument naming the bad option (channels not positive or not divisible by
  /// groups, kernel, stride or dilation below 1, negative padding).
  explicit Conv2d(const Conv2dOptions& options);

  const Conv2dGeometry& geometry() const noexcept { return geometry_; }
  std::string describe() const override;

 protected:
  Tensor forward_impl(const Tensor& x, Context& ctx) override;
  Tensor backward_impl(const Tensor& dy, Context& ctx) override;

 private:
  Conv2dGeometry geometry_;
};

}  // namespace stoke::nn
