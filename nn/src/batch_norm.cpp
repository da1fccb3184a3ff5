#include "stoke/nn/batch_norm.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace stoke::nn {
namespace {

// A double as Python's repr writes it ("1e-05", "0.1", "1.0"), so describe() reads like PyTorch's.
std::string python_float(double v) {
  char text[64];
  const double magnitude = std::abs(v);
  const bool scientific = magnitude != 0 && (magnitude < 1e-4 || magnitude >= 1e16);
  const auto result =
      std::to_chars(text, text + sizeof text, v, scientific ? std::chars_format::scientific : std::chars_format::fixed);
  std::string s(text, result.ptr);
  if (!scientific && s.find('.') == std::string::npos) s += ".0";
  return s;
}

// Checks the options first, so a bad one is reported before anything is allocated.
WeightedLayer::InitialValues initial_values(const BatchNorm2dOptions& options) {
  if (options.channels < 1) {
    throw std::invalid_argument("BatchNorm2d: channels is " + std::to_string(options.channels) +
                                ", must be at least 1");
  }
  if (!(options.eps > 0)) {
    throw std::invalid_argument("BatchNorm2d(" + std::to_string(options.channels) + "): eps is " +
                                python_float(options.eps) + ", must be positive");
  }
  if (!(options.momentum >= 0 && options.momentum <= 1)) {
    throw std::invalid_argument("BatchNorm2d(" + std::to_string(options.channels) + "): momentum is " +
                                python_float(options.momentum) + ", must be in [0, 1]");
  }
  Tensor gamma({options.channels});
  for (float& v : gamma.f32()) v = options.zero_gamma ? 0.0f : 1.0f;
  return {.weight = std::move(gamma), .bias = Tensor::zeros({options.channels}), .weight_decays = false};
}

// ---- sync batch norm's host side

// A host f32 copy of `t` in its own layout: `t` itself when it is f32 on the CPU; else cast to f32
// by the backend and copied to the host, enqueued on the backend's stream: wait for it
// (wait_for_copies) before reading.
Tensor host_f32(const Tensor& t, Backend& backend) {
  Tensor wide = t;
  if (t.dtype() != DType::f32) {
    wide = backend.empty(t.shape(), DType::f32, t.layout());
    backend.cast(t, wide);
  }
  if (wide.device().is_cpu()) return wide;
  return wide.to(Device::cpu(), backend.stream());
}

void wait_for_copies(Backend& backend) {
  if (!backend.device().is_cpu()) backend.stream().synchronize();
}

// `host` (f32, on the host) as a tensor of `dtype` on the backend's device: itself on the CPU in
// f32; else copied into the backend's memory (a copy from pageable host memory is staged before it
// returns, so `host` may go) and cast by the backend.
Tensor on_device(const Tensor& host, DType dtype, Backend& backend) {
  Tensor placed = host;
  if (!backend.device().is_cpu()) {
    placed = backend.empty(host.shape(), DType::f32, host.layout());
    placed.copy_from(host, backend.stream());
  }
  if (dtype == DType::f32) return placed;
  Tensor out = backend.empty(host.shape(), dtype, host.layout());
  backend.cast(placed, out);
  return out;
}

// `values` as an f32 {size} tensor on the backend's device.
Tensor upload(std::span<const double> values, Backend& backend) {
  Tensor host({static_cast<std::int64_t>(values.size())});
  std::transform(values.begin(), values.end(), host.f32().begin(), [](double v) { return static_cast<float>(v); });
  return on_device(host, DType::f32, backend);
}

// Calls f(at, ch) for every element of the host tensor `t` {N, C, H, W} in memory order: `at` is
// its index in memory, `ch` its channel, whichever of NCHW and NHWC the layout is.
template <class F>
void for_each_element(const Tensor& t, const F& f) {
  const std::int64_t n = t.dim(0);
  const std::int64_t c = t.dim(1);
  const std::int64_t hw = t.dim(2) * t.dim(3);
  std::int64_t at = 0;
  if (t.layout() == TensorLayout::nhwc) {
    for (std::int64_t pixel = 0; pixel < n * hw; ++pixel) {
      for (std::int64_t ch = 0; ch < c; ++ch) f(at++, ch);
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t ch = 0; ch < c; ++ch) {
      for (std::int64_t k = 0; k < hw; ++k) f(at++, ch);
    }
  }
}

}  // namespace

BatchNorm2d::BatchNorm2d(const BatchNorm2dOptions& options)
    : WeightedLayer(initial_values(options)),
      options_(options),
      running_mean_(Tensor::zeros({options.channels})),
      running_var_({options.channels}) {
  for (float& v : running_var_.f32()) v = 1.0f;
}

std::string BatchNorm2d::describe() const {
  return "BatchNorm2d(" + std::to_string(options_.channels) + ", eps=" + python_float(options_.eps) +
         ", momentum=" + python_float(options_.momentum) + (options_.relu ? ", relu=True)" : ")");
}

void BatchNorm2d::for_each_buffer(const BufferVisitor& visit, const std::string& prefix) {
  visit(join(prefix, "running_mean"), running_mean_);
  visit(join(prefix, "running_var"), running_var_);
}

void BatchNorm2d::release_activations() {
  WeightedLayer::release_activations();
  saved_mean_ = {};
  saved_invstd_ = {};
  output_ = {};
  joined_ = false;
  synced_mean_.clear();
  synced_invstd_.clear();
  synced_count_ = 0;
}

Tensor BatchNorm2d::forward(const Tensor& x, const Tensor& residual, Context& ctx) {
  if (!options_.relu) {
    throw std::invalid_argument(describe() + ": a residual join needs the fused ReLU (BatchNorm2dOptions::relu)");
  }
  if (!residual.defined() || !x.defined() || residual.shape() != x.shape() || residual.dtype() != x.dtype() ||
      residual.layout() != x.layout() || residual.device() != x.device()) {
    throw std::invalid_argument(describe() + ": the residual " + residual.describe() + " does not match the input " +
                                x.describe() + " (the same shape, dtype, layout and device)");
  }
  return forward_as(x, ctx, [&] { return forward_joined(x, residual, ctx); });
}

Tensor BatchNorm2d::backward(const Tensor& dy, Context& ctx, Tensor& dresidual) {
  return backward_as(dy, ctx, [&] { return backward_joined(dy, ctx, &dresidual); });
}

Tensor BatchNorm2d::forward_impl(const Tensor& x, Context& ctx) { return forward_joined(x, Tensor(), ctx); }

Tensor BatchNorm2d::backward_impl(const Tensor& dy, Context& ctx) { return backward_joined(dy, ctx, nullptr); }

void BatchNorm2d::finish_in_place(const Tensor& y, const Tensor& residual, Backend& backend) const {
  if (residual.defined()) backend.add(y, residual, y);
  if (options_.relu) backend.relu_forward(y, y);
}

Tensor BatchNorm2d::forward_joined(const Tensor& x, const Tensor& residual, Context& ctx) {
  if (x.rank() != 4 || x.dim(1) != options_.channels) {
    throw std::invalid_argument(describe() + ": the input is " + x.describe() + ", expected [N, " +
                                std::to_string(options_.channels) + ", H, W]");
  }
  if (x.dtype() == DType::u8 || x.dtype() == DType::i32) {
    throw std::invalid_argument(describe() + ": the input " + x.describe() +
                                " is not floating point (f32, bf16 or f16)");
  }
  if (ctx.mode == Mode::eval) {
    Tensor y = ctx.backend.empty(x.shape(), x.dtype(), x.layout());
    ctx.backend.batch_norm_forward_inference(x, gamma().value, beta().value, running_mean_, running_var_, options_.eps,
                                             y);
    finish_in_place(y, residual, ctx.backend);
    release_activations();
    return y;
  }
  if (ctx.batch_norm_sync != nullptr) {
    Tensor y = forward_synced(x, ctx);
    finish_in_place(y, residual, ctx.backend);
    if (options_.relu) output_ = y;
    joined_ = residual.defined();
    return y;
  }
  synced_mean_.clear();  // this forward's backward is the replica's own
  synced_invstd_.clear();
  if (x.dim(0) * x.dim(2) * x.dim(3) < 2) {
    // As PyTorch: one value per channel has no variance to normalise by.
    throw std::invalid_argument(describe() + ": the input is " + x.describe() +
                                "; training needs more than one value per channel (N * H * W > 1)");
  }
  Tensor y = ctx.backend.empty(x.shape(), x.dtype(), x.layout());
  const Shape channels{options_.channels};
  saved_mean_ = ctx.backend.empty(channels);
  saved_invstd_ = ctx.backend.empty(channels);
  if (options_.relu) {
    ctx.backend.batch_norm_relu_forward_training(x, gamma().value, beta().value, running_mean_, running_var_,
                                                 options_.momentum, options_.eps, residual, y, saved_mean_,
                                                 saved_invstd_);
    output_ = y;
  } else {
    ctx.backend.batch_norm_forward_training(x, gamma().value, beta().value, running_mean_, running_var_,
                                            options_.momentum, options_.eps, y, saved_mean_, saved_invstd_);
  }
  keep_for_backward(x, Tensor(), ctx.mode);  // the kernels take the f32 gamma itself: no compute weight
  joined_ = residual.defined();
  return y;
}

Tensor BatchNorm2d::backward_joined(const Tensor& dy, Context& ctx, Tensor* dresidual) {
  const Tensor& x = input();
  if (joined_ != (dresidual != nullptr)) {
    throw std::logic_error(describe() + (joined_
                                             ? ": the forward had a residual; its backward is backward(dy, ctx, "
                                               "dresidual), which gives the residual's gradient too"
                                             : ": backward(dy, ctx, dresidual) after a forward without a residual"));
  }
  if (dy.shape() != x.shape()) {
    throw std::invalid_argument(describe() + ": the output gradient is " + dy.describe() + ", expected " +
                                to_string(x.shape()) + " (the shape of the last forward's output)");
  }
  Backend& backend = ctx.backend;
  if (!synced_mean_.empty()) {
    Tensor dz = dy;
    if (options_.relu) {
      dz = backend.empty(dy.shape(), dy.dtype(), dy.layout());
      backend.relu_backward(output_, dy, dz);
    }
    if (dresidual != nullptr) *dresidual = dz;
    return backward_synced(dz, ctx);
  }
  Tensor dx = backend.empty(x.shape(), x.dtype(), x.layout());
  const Tensor dres = dresidual != nullptr ? backend.empty(x.shape(), x.dtype(), x.layout()) : Tensor();
  // Batch norm's kernels take f32 parameters whatever x's dtype: the gradients are the f32 ones.
  accumulate_gradients(backend, DType::f32, [&](const Tensor& dgamma, const Tensor& dbeta) {
    if (options_.relu) {
      backend.batch_norm_relu_backward(x, output_, dy, gamma().value, saved_mean_, saved_invstd_, dx, dres, dgamma,
                                       dbeta);
    } else {
      backend.batch_norm_backward(x, dy, gamma().value, saved_mean_, saved_invstd_, dx, dgamma, dbeta);
    }
  });
  if (dresidual != nullptr) *dresidual = dres;
  release_activations();
  return dx;
}

// Sync batch norm on the host (the header says why and what it costs). Sums are in double, one
// pass: sum(x^2) / count - mean^2 loses to cancellation only for a channel whose mean is some
// thousands of its standard deviations (double's 16 digits against f32 input's 7).
Tensor BatchNorm2d::forward_synced(const Tensor& x, Context& ctx) {
  Backend& backend = ctx.backend;
  const auto c = static_cast<std::size_t>(options_.channels);
  const Tensor host_x = host_f32(x, backend);
  const Tensor host_gamma = host_f32(gamma().value, backend);
  const Tensor host_beta = host_f32(beta().value, backend);
  wait_for_copies(backend);
  const float* xp = host_x.data_as<const float>();
  const float* g = host_gamma.data_as<const float>();
  const float* b = host_beta.data_as<const float>();

  // One sum over the replicas: {count, sum(x) per channel, sum(x^2) per channel}.
  std::vector<double> stats(1 + 2 * c, 0.0);
  stats[0] = static_cast<double>(x.dim(0) * x.dim(2) * x.dim(3));
  {
    double* sums = stats.data() + 1;
    double* squares = sums + c;
    for_each_element(host_x, [&](std::int64_t at, std::int64_t ch) {
      const auto v = static_cast<double>(xp[at]);
      sums[ch] += v;
      squares[ch] += v * v;
    });
  }
  ctx.batch_norm_sync->sum(stats);
  const double count = stats[0];
  if (!(count > 1)) {
    // As PyTorch: one value per channel has no variance to normalise by (every replica throws).
    throw std::invalid_argument(describe() + ": the input is " + x.describe() + " and the replicas' N * H * W sum to " +
                                std::to_string(static_cast<std::int64_t>(count)) +
                                "; training needs more than one value per channel over all replicas");
  }

  std::vector<double> scale(c);
  std::vector<double> shift(c);
  std::vector<double> mean_step(c);  // momentum * the batch's statistic, for the running ones
  std::vector<double> var_step(c);
  synced_mean_.assign(c, 0.0);
  synced_invstd_.assign(c, 0.0);
  synced_count_ = count;
  for (std::size_t ch = 0; ch < c; ++ch) {
    const double mean = stats[1 + ch] / count;
    const double var = std::max(0.0, stats[1 + c + ch] / count - mean * mean);  // biased
    const double invstd = 1.0 / std::sqrt(var + options_.eps);
    synced_mean_[ch] = mean;
    synced_invstd_[ch] = invstd;
    scale[ch] = static_cast<double>(g[ch]) * invstd;
    shift[ch] = static_cast<double>(b[ch]) - mean * scale[ch];
    // PyTorch normalises with the biased variance but keeps the unbiased one as running_var.
    mean_step[ch] = options_.momentum * mean;
    var_step[ch] = options_.momentum * var * count / (count - 1);
  }

  Tensor y_host(x.shape(), DType::f32, Device::cpu(), x.layout());
  float* yp = y_host.data_as<float>();
  for_each_element(host_x, [&](std::int64_t at, std::int64_t ch) {
    const auto k = static_cast<std::size_t>(ch);
    yp[at] = static_cast<float>(static_cast<double>(xp[at]) * scale[k] + shift[k]);
  });
  Tensor y = on_device(y_host, x.dtype(), backend);

  // running = (1 - momentum) running + momentum batch, on the running statistics' device.
  const auto keep = static_cast<float>(1 - options_.momentum);
  backend.scale(running_mean_, keep);
  backend.add(running_mean_, upload(mean_step, backend), running_mean_);
  backend.scale(running_var_, keep);
  backend.add(running_var_, upload(var_step, backend), running_var_);

  saved_mean_ = {};
  saved_invstd_ = {};
  keep_for_backward(x, Tensor(), ctx.mode);
  return y;
}

Tensor BatchNorm2d::backward_synced(const Tensor& dy, Context& ctx) {
  const Tensor& x = input();
  if (ctx.batch_norm_sync == nullptr) {
    throw std::logic_error(describe() +
                           ": backward after a synced forward without Context::batch_norm_sync (the input "
                           "gradient takes sums over all the replicas)");
  }
  if (dy.layout() != x.layout()) {
    throw std::invalid_argument(describe() + ": the output gradient " + dy.describe() +
                                " is not in the layout of the input " + x.describe());
  }
  Backend& backend = ctx.backend;
  const auto c = static_cast<std::size_t>(options_.channels);
  const Tensor host_x = host_f32(x, backend);
  const Tensor host_dy = host_f32(dy, backend);
  const Tensor host_gamma = host_f32(gamma().value, backend);
  wait_for_copies(backend);
  const float* xp = host_x.data_as<const float>();
  const float* dyp = host_dy.data_as<const float>();
  const float* g = host_gamma.data_as<const float>();
  const auto xhat = [&](std::int64_t at, std::size_t ch) {
    return (static_cast<double>(xp[at]) - synced_mean_[ch]) * synced_invstd_[ch];
  };

  // {sum(dy) per channel, sum(dy * xhat) per channel}: this replica's are beta's and gamma's
  // gradients; their sums over the replicas are what the input gradient removes.
  std::vector<double> sums(2 * c, 0.0);
  for_each_element(host_x, [&](std::int64_t at, std::int64_t ch) {
    const auto k = static_cast<std::size_t>(ch);
    const auto d = static_cast<double>(dyp[at]);
    sums[k] += d;
    sums[c + k] += d * xhat(at, k);
  });
  const std::vector<double> local = sums;
  ctx.batch_norm_sync->sum(sums);

  // dx = gamma * invstd * (dy - sum(dy) / count - xhat * sum(dy * xhat) / count), global sums.
  Tensor dx_host(x.shape(), DType::f32, Device::cpu(), x.layout());
  float* dxp = dx_host.data_as<float>();
  for_each_element(host_x, [&](std::int64_t at, std::int64_t ch) {
    const auto k = static_cast<std::size_t>(ch);
    const double scale = static_cast<double>(g[k]) * synced_invstd_[k];
    dxp[at] = static_cast<float>(
        scale * (static_cast<double>(dyp[at]) - sums[k] / synced_count_ - xhat(at, k) * sums[c + k] / synced_count_));
  });
  Tensor dx = on_device(dx_host, x.dtype(), backend);

  // The parameters' gradients are f32 whatever x's dtype, as the kernels' are.
  accumulate_gradients(backend, DType::f32, [&](const Tensor& dgamma, const Tensor& dbeta) {
    const std::span<const double> all(local);
    backend.add(dgamma, upload(all.subspan(c), backend), dgamma);
    backend.add(dbeta, upload(all.first(c), backend), dbeta);
  });
  release_activations();
  return dx;
}

}  // namespace stoke::nn
