// Test helpers for nn/ layers and losses: random tensors, and numeric gradient checks of a
// layer's backward and a loss's dlogits against central differences (Caffe's gradient checker).
//
//   CpuFixture f;                                           // a CPU backend and a training context
//   Tensor x = random_tensor({2, 3, 5, 5}, 1);
//   expect_gradients_match(conv, x, f.ctx);                 // dx and every parameter's gradient
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <stoke/base/random.hpp>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/layer.hpp>
#include <stoke/nn/loss.hpp>
#include <stoke/nn/tensor.hpp>
#include <string>
#include <vector>

namespace stoke::nn::testing {

/// A host f32 tensor of values uniform in [lo, hi), a function of `seed`.
inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t(shape);
  base::ItemRng rng(seed, 0, 0);
  for (float& v : t.f32()) v = static_cast<float>(rng.uniform(lo, hi));
  return t;
}

/// Expects t's elements (read as host floats) within `tolerance` of `expected`, each failure
/// naming `what` and the element.
inline void expect_values(const Tensor& t, const std::vector<double>& expected, double tolerance,
                          const std::string& what) {
  const std::vector<float> actual = t.to_vector();
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) EXPECT_NEAR(actual[i], expected[i], tolerance) << what << " " << i;
}

/// A CPU backend and a context in training mode.
struct CpuFixture {
  std::unique_ptr<Backend> backend = make_backend(Device::cpu());
  Context ctx{.backend = *backend, .mode = Mode::train, .seed = 7, .step = 0};
};

struct GradCheckOptions {
  double eps = 1e-2;   ///< the step of the central difference
  double rtol = 2e-2;  ///< |analytic - numeric| <= atol + rtol * |numeric|
  double atol = 2e-3;
  std::size_t samples = 60;  ///< elements checked per tensor (spread over it), all when fewer
};

namespace detail {

// L = sum(forward(x) * r), in double: the probe whose gradient backward computes for dy = r.
inline double probe_loss(Layer& layer, const Tensor& x, const Tensor& r, Context& ctx) {
  const Tensor y = layer.forward(x, ctx);
  const std::vector<float> values = y.to_vector();
  const auto weights = r.f32();
  double loss = 0;
  for (std::size_t i = 0; i < values.size(); ++i)
    loss += static_cast<double>(values[i]) * static_cast<double>(weights[i]);
  return loss;
}

inline void check_elements(Layer& layer, const Tensor& x, const Tensor& r, Context& ctx, const Tensor& target,
                           const std::vector<float>& analytic, const std::string& what,
                           const GradCheckOptions& options) {
  const auto values = target.f32();
  const std::size_t n = values.size();
  const std::size_t step = std::max<std::size_t>(1, n / options.samples);
  for (std::size_t i = 0; i < n; i += step) {
    const float original = values[i];
    values[i] = static_cast<float>(static_cast<double>(original) + options.eps);
    const double plus = probe_loss(layer, x, r, ctx);
    values[i] = static_cast<float>(static_cast<double>(original) - options.eps);
    const double minus = probe_loss(layer, x, r, ctx);
    values[i] = original;
    const double numeric = (plus - minus) / (2 * options.eps);
    EXPECT_NEAR(analytic[i], numeric, options.atol + options.rtol * std::abs(numeric))
        << what << " element " << i << " of " << n;
  }
}

}  // namespace detail

/// Checks `layer`'s backward at input `x` (a host f32 tensor) against central differences: the
/// input gradient, and the gradient of every parameter. The layer must be deterministic in
/// ctx.mode (dropout: the same seed and step give the same mask).
inline void expect_gradients_match(Layer& layer, const Tensor& x, Context& ctx, const GradCheckOptions& options = {}) {
  const Tensor y = layer.forward(x, ctx);
  const Tensor r = random_tensor(y.shape(), 1234);
  layer.for_each_parameter([](const std::string&, Parameter& p) {
    if (p.grad.defined()) p.grad.zero();
  });
  const Tensor dx = layer.backward(r, ctx);
  ASSERT_EQ(dx.shape(), x.shape()) << layer.describe();
  const std::vector<float> dx_values = dx.to_vector();
  detail::check_elements(layer, x, r, ctx, x, dx_values, layer.describe() + " input gradient", options);
  layer.for_each_parameter([&](const std::string& name, Parameter& p) {
    ASSERT_TRUE(p.grad.defined()) << name << " has no gradient after backward";
    const std::vector<float> grad = p.grad.to_vector();
    detail::check_elements(layer, x, r, ctx, p.value, grad, layer.describe() + " " + name, options);
  });
}

/// Checks `loss`'s dlogits at `logits` (a host f32 tensor) against central differences of its mean
/// loss, element by element (what dlogits is the gradient of, for grad_scale 1).
inline void expect_loss_gradient_matches(const Loss& loss, const Tensor& logits, const Tensor& targets, Context& ctx,
                                         double atol, double rtol = 1e-2) {
  const std::vector<float> analytic = loss.forward(logits, targets, ctx).dlogits.to_vector();
  const auto values = logits.f32();
  constexpr double eps = 1e-2;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float original = values[i];
    values[i] = static_cast<float>(static_cast<double>(original) + eps);
    const double plus = loss.forward(logits, targets, ctx).read().loss;
    values[i] = static_cast<float>(static_cast<double>(original) - eps);
    const double minus = loss.forward(logits, targets, ctx).read().loss;
    values[i] = original;
    const double numeric = (plus - minus) / (2 * eps);
    EXPECT_NEAR(analytic[i], numeric, atol + rtol * std::abs(numeric)) << loss.name() << " element " << i;
  }
}

}  // namespace stoke::nn::testing
