#include "stoke/nn/conv2d.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>
#include <utility>

#include "stoke/base/random.hpp"

namespace stoke::nn {
namespace {

Conv2dGeometry checked_geometry(const Conv2dOptions& o) {
  const auto fail = [](const std::string& what) { throw std::invalid_argument("Conv2d: " + what); };
  if (o.in_channels < 1) fail("in_channels = " + std::to_string(o.in_channels) + " must be positive");
  if (o.out_channels < 1) fail("out_channels = " + std::to_string(o.out_channels) + " must be positive");
  if (o.kernel < 1) fail("kernel = " + std::to_string(o.kernel) + " must be at least 1");
  if (o.stride < 1) fail("stride = " + std::to_string(o.stride) + " must be at least 1");
  if (o.dilation < 1) fail("dilation = " + std::to_string(o.dilation) + " must be at least 1");
  if (o.padding < 0) fail("padding = " + std::to_string(o.padding) + " must not be negative");
  if (o.groups < 1) fail("groups = " + std::to_string(o.groups) + " must be at least 1");
  if (o.in_channels % o.groups != 0 || o.out_channels % o.groups != 0) {
    fail("groups = " + std::to_string(o.groups) + " must divide in_channels = " + std::to_string(o.in_channels) +
         " and out_channels = " + std::to_string(o.out_channels));
  }
  return {.in_channels = o.in_channels,
          .out_channels = o.out_channels,
          .kernel = o.kernel,
          .stride = o.stride,
          .padding = o.padding,
          .dilation = o.dilation,
          .groups = o.groups};
}

// He's initialisation with fan_out (torchvision's ResNets: kaiming_normal_(mode="fan_out")),
// normal samples by Box-Muller.
Tensor he_normal(const Conv2dGeometry& g, std::uint64_t seed) {
  Tensor w(g.weight_shape());
  const double fan_out = static_cast<double>(g.out_channels / g.groups) * g.kernel * g.kernel;
  const double sigma = std::sqrt(2.0 / fan_out);
  base::ItemRng rng(seed, 0, 0);
  const auto values = w.f32();
  for (std::size_t i = 0; i < values.size(); i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(1.0 - rng.uniform()));  // 1 - u is in (0, 1]
    const double angle = 2.0 * std::numbers::pi * rng.uniform();
    values[i] = static_cast<float>(sigma * radius * std::cos(angle));
    if (i + 1 < values.size()) values[i + 1] = static_cast<float>(sigma * radius * std::sin(angle));
  }
  return w;
}

// Checks the options first, so a bad one is reported before anything is allocated.
WeightedLayer::InitialValues initial_values(const Conv2dOptions& options) {
  const Conv2dGeometry g = checked_geometry(options);
  return {.weight = he_normal(g, options.seed),
          .bias = options.bias ? Tensor::zeros({g.out_channels}) : Tensor(),
          .weight_decays = true};
}

std::string pair(std::int64_t v) { return "(" + std::to_string(v) + ", " + std::to_string(v) + ")"; }

}  // namespace

Conv2d::Conv2d(const Conv2dOptions& options)
    : WeightedLayer(initial_values(options)), geometry_(checked_geometry(options)) {}

std::string Conv2d::describe() const {
  const Conv2dGeometry& g = geometry_;
  std::string text = "Conv2d(" + std::to_string(g.in_channels) + ", " + std::to_string(g.out_channels) +
                     ", kernel_size=" + pair(g.kernel) + ", stride=" + pair(g.stride);
  if (g.padding != 0) text += ", padding=" + pair(g.padding);
  if (g.dilation != 1) text += ", dilation=" + pair(g.dilation);
  if (g.groups != 1) text += ", groups=" + std::to_string(g.groups);
  if (!has_bias()) text += ", bias=False";
  return text + ")";
}

Tensor Conv2d::forward_impl(const Tensor& x, Context& ctx) {
  const Conv2dGeometry& g = geometry_;
  const std::int64_t reach = g.dilation * (g.kernel - 1) + 1;  // the input span one output sees
  const bool fits = x.rank() == 4 && x.dim(1) == g.in_channels && x.dim(2) + 2 * g.padding >= reach &&
                    x.dim(3) + 2 * g.padding >= reach;
  if (!fits) {
    throw std::invalid_argument(describe() + ": input " + x.describe() + "; expected {N, " +
                                std::to_string(g.in_channels) + ", H, W} with H and W at least " +
                                std::to_string(std::max<std::int64_t>(reach - 2 * g.padding, 1)));
  }
  Tensor y = ctx.backend.empty({x.dim(0), g.out_channels, g.output_size(x.dim(2)), g.output_size(x.dim(3))}, x.dtype(),
                               x.layout());
  auto [w, b] = compute_parameters(x, ctx.backend);
  ctx.backend.conv2d_forward(g, x, w, b, y);
  keep_for_backward(x, std::move(w), ctx.mode);  // backward's data gradient needs the same (cast) weights
  return y;
}

Tensor Conv2d::backward_impl(const Tensor& dy, Context& ctx) {
  const Conv2dGeometry& g = geometry_;
  const Tensor& x = input();
  const Shape expected{x.dim(0), g.out_channels, g.output_size(x.dim(2)), g.output_size(x.dim(3))};
  if (dy.shape() != expected) {
    throw std::invalid_argument(describe() + ": gradient " + dy.describe() + "; expected the output's shape " +
                                to_string(expected));
  }
  Tensor dx = ctx.backend.empty(x.shape(), x.dtype(), x.layout());
  ctx.backend.conv2d_backward_data(g, dy, compute_weight(), dx);
  accumulate_gradients(ctx.backend, x.dtype(), [&](const Tensor& dw, const Tensor& db) {
    ctx.backend.conv2d_backward_filter(g, x, dy, dw, db);
  });
  release_activations();
  return dx;
}

}  // namespace stoke::nn
