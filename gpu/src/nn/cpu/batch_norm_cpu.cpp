// CpuBackend's batch normalisation: one oneTBB task per channel (or block of channels). In NCHW a
// channel's elements are N planes of H*W, one per item, C planes apart; its sums are kept in
// double, so a channel of millions of elements normalises as exactly as float allows.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cpu_backend.hpp"

namespace stoke::gpu::nn {
namespace {

struct Planes {
  std::int64_t n = 0;
  std::int64_t c = 0;
  std::int64_t hw = 0;
  std::int64_t per_channel() const noexcept { return n * hw; }
  // The first element of item i's plane of channel ch.
  std::int64_t offset(std::int64_t i, std::int64_t ch) const noexcept { return (i * c + ch) * hw; }
};

Planes planes_of(const Tensor& x, const char* kernel) {
  if (x.rank() != 4) {
    throw std::invalid_argument(std::string("CpuBackend::") + kernel + ": x is " + to_string(x.shape()) +
                                ", expected {N, C, H, W}");
  }
  return {.n = x.dim(0), .c = x.dim(1), .hw = x.dim(2) * x.dim(3)};
}

void require_like(const Tensor& t, const Shape& shape, const char* kernel, const char* what) {
  require_cpu_f32(t, what);
  if (t.shape() != shape) {
    throw std::invalid_argument(std::string("CpuBackend::") + kernel + ": " + what + " is " + to_string(t.shape()) +
                                ", expected " + to_string(shape));
  }
}

// Calls f(first, last) for blocks of channels in parallel.
template <class F>
void for_channels(const Planes& p, F&& f) {
  // A block should hold some tens of thousands of elements before a task is worth its overhead.
  const std::int64_t grain = std::max<std::int64_t>(1, (1 << 15) / std::max<std::int64_t>(1, p.per_channel()));
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, p.c, grain),
                    [&](const tbb::blocked_range<std::int64_t>& channels) { f(channels.begin(), channels.end()); });
}

// y = x * scale + shift over channel ch.
void affine_channel(const Planes& p, std::int64_t ch, const float* x, float* y, float scale, float shift) {
  for (std::int64_t i = 0; i < p.n; ++i) {
    const float* in = x + p.offset(i, ch);
    float* out = y + p.offset(i, ch);
    for (std::int64_t k = 0; k < p.hw; ++k) out[k] = in[k] * scale + shift;
  }
}

}  // namespace

void CpuBackend::batch_norm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                             const Tensor& running_mean, const Tensor& running_var, double momentum,
                                             double eps, const Tensor& y, const Tensor& saved_mean,
                                             const Tensor& saved_invstd) {
  constexpr const char* kernel = "batch_norm_forward_training";
  require_cpu_f32(x, "batch_norm_forward_training's x");
  const Planes p = planes_of(x, kernel);
  const Shape channels{p.c};
  require_like(gamma, channels, kernel, "gamma");
  require_like(beta, channels, kernel, "beta");
  require_like(running_mean, channels, kernel, "running_mean");
  require_like(running_var, channels, kernel, "running_var");
  require_like(y, x.shape(), kernel, "y");
  require_like(saved_mean, channels, kernel, "saved_mean");
  require_like(saved_invstd, channels, kernel, "saved_invstd");
  const std::int64_t m = p.per_channel();
  if (m < 2) {
    throw std::invalid_argument("CpuBackend::batch_norm_forward_training: x is " + to_string(x.shape()) +
                                ": batch statistics need more than one value per channel");
  }

  const float* xp = x.data_as<const float>();
  float* yp = y.data_as<float>();
  const float* g = gamma.data_as<const float>();
  const float* b = beta.data_as<const float>();
  float* rm = running_mean.data_as<float>();
  float* rv = running_var.data_as<float>();
  float* sm = saved_mean.data_as<float>();
  float* si = saved_invstd.data_as<float>();

  for_channels(p, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t ch = first; ch < last; ++ch) {
      // Two passes (mean, then squared deviations): no cancellation for a channel far from zero.
      double sum = 0;
      for (std::int64_t i = 0; i < p.n; ++i) {
        const float* in = xp + p.offset(i, ch);
        for (std::int64_t k = 0; k < p.hw; ++k) sum += static_cast<double>(in[k]);
      }
      const double mean = sum / static_cast<double>(m);
      double squares = 0;
      for (std::int64_t i = 0; i < p.n; ++i) {
        const float* in = xp + p.offset(i, ch);
        for (std::int64_t k = 0; k < p.hw; ++k) {
          const double d = static_cast<double>(in[k]) - mean;
          squares += d * d;
        }
      }
      const double invstd = 1.0 / std::sqrt(squares / static_cast<double>(m) + eps);
      sm[ch] = static_cast<float>(mean);
      si[ch] = static_cast<float>(invstd);
      // PyTorch normalises with the biased variance but keeps the unbiased one as running_var.
      const double unbiased = squares / static_cast<double>(m - 1);
      rm[ch] = static_cast<float>((1 - momentum) * static_cast<double>(rm[ch]) + momentum * mean);
      rv[ch] = static_cast<float>((1 - momentum) * static_cast<double>(rv[ch]) + momentum * unbiased);
      const double scale = static_cast<double>(g[ch]) * invstd;
      affine_channel(p, ch, xp, yp, static_cast<float>(scale),
                     static_cast<float>(static_cast<double>(b[ch]) - mean * scale));
    }
  });
}

void CpuBackend::batch_norm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                              const Tensor& running_mean, const Tensor& running_var, double eps,
                                              const Tensor& y) {
  constexpr const char* kernel = "batch_norm_forward_inference";
  require_cpu_f32(x, "batch_norm_forward_inference's x");
  const Planes p = planes_of(x, kernel);
  const Shape channels{p.c};
  require_like(gamma, channels, kernel, "gamma");
  require_like(beta, channels, kernel, "beta");
  require_like(running_mean, channels, kernel, "running_mean");
  require_like(running_var, channels, kernel, "running_var");
  require_like(y, x.shape(), kernel, "y");

  const float* xp = x.data_as<const float>();
  float* yp = y.data_as<float>();
  const float* g = gamma.data_as<const float>();
  const float* b = beta.data_as<const float>();
  const float* rm = running_mean.data_as<const float>();
  const float* rv = running_var.data_as<const float>();
  for_channels(p, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t ch = first; ch < last; ++ch) {
      const double scale = static_cast<double>(g[ch]) / std::sqrt(static_cast<double>(rv[ch]) + eps);
      affine_channel(p, ch, xp, yp, static_cast<float>(scale),
                     static_cast<float>(static_cast<double>(b[ch]) - static_cast<double>(rm[ch]) * scale));
    }
  });
}

void CpuBackend::batch_norm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& saved_mean,
                                     const Tensor& saved_invstd, const Tensor& dx, const Tensor& dgamma,
                                     const Tensor& dbeta) {
  constexpr const char* kernel = "batch_norm_backward";
  require_cpu_f32(x, "batch_norm_backward's x");
  const Planes p = planes_of(x, kernel);
  const Shape channels{p.c};
  require_like(dy, x.shape(), kernel, "dy");
  require_like(gamma, channels, kernel, "gamma");
  require_like(saved_mean, channels, kernel, "saved_mean");
  require_like(saved_invstd, channels, kernel, "saved_invstd");
  if (dx.defined()) require_like(dx, x.shape(), kernel, "dx");
  if (dgamma.defined()) require_like(dgamma, channels, kernel, "dgamma");
  if (dbeta.defined()) require_like(dbeta, channels, kernel, "dbeta");

  const float* xp = x.data_as<const float>();
  const float* dyp = dy.data_as<const float>();
  const float* g = gamma.data_as<const float>();
  const float* sm = saved_mean.data_as<const float>();
  const float* si = saved_invstd.data_as<const float>();
  float* dxp = dx.defined() ? dx.data_as<float>() : nullptr;
  float* dg = dgamma.defined() ? dgamma.data_as<float>() : nullptr;
  float* db = dbeta.defined() ? dbeta.data_as<float>() : nullptr;
  const auto m = static_cast<double>(p.per_channel());

  for_channels(p, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t ch = first; ch < last; ++ch) {
      const double mean = static_cast<double>(sm[ch]);
      const double invstd = static_cast<double>(si[ch]);
      // sum(dy) and sum(dy * xhat), xhat = (x - mean) * invstd: the gradients of beta and gamma,
      // and the two projections the input gradient removes.
      double sum_dy = 0;
      double sum_dy_xhat = 0;
      for (std::int64_t i = 0; i < p.n; ++i) {
        const float* in = xp + p.offset(i, ch);
        const float* grad = dyp + p.offset(i, ch);
        for (std::int64_t k = 0; k < p.hw; ++k) {
          const auto g_k = static_cast<double>(grad[k]);
          sum_dy += g_k;
          sum_dy_xhat += g_k * ((static_cast<double>(in[k]) - mean) * invstd);
        }
      }
      if (dg != nullptr) dg[ch] += static_cast<float>(sum_dy_xhat);
      if (db != nullptr) db[ch] += static_cast<float>(sum_dy);
      if (dxp == nullptr) continue;
      // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)).
      const double scale = static_cast<double>(g[ch]) * invstd;
      const double mean_dy = sum_dy / m;
      const double mean_dy_xhat = sum_dy_xhat / m;
      for (std::int64_t i = 0; i < p.n; ++i) {
        const float* in = xp + p.offset(i, ch);
        const float* grad = dyp + p.offset(i, ch);
        float* out = dxp + p.offset(i, ch);
        for (std::int64_t k = 0; k < p.hw; ++k) {
          const double xhat = (static_cast<double>(in[k]) - mean) * invstd;
          out[k] = static_cast<float>(scale * (static_cast<double>(grad[k]) - mean_dy - xhat * mean_dy_xhat));
        }
      }
    }
  });
}

}  // namespace stoke::gpu::nn
