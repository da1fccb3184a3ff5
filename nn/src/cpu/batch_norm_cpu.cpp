// CpuBackend's batch normalisation: one oneTBB task per channel (or block of channels). In NCHW a
// channel's elements are N planes of H*W, one per item, C planes apart.
//
// The sums run in float over blocks of at most kBlock elements of a plane, in kLanes interleaved
// partial sums (which the compiler keeps in vector registers; a single double accumulator would
// serialise every add), and the block sums are added in double. No float sum ever holds more than
// kBlock / kLanes terms, so a channel of millions of elements still normalises as exactly as float
// allows. The order of every addition is fixed by the shape alone: the same input gives the same
// bits whichever thread runs which channel.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cpu_backend.hpp"

namespace stoke::nn {
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

// The checks both forward passes make: x {N, C, H, W} f32, y like x, the parameters and running
// statistics {C}. Returns x's planes.
Planes check_forward(const char* kernel, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                     const Tensor& running_mean, const Tensor& running_var, const Tensor& y) {
  require_cpu_f32(x, (std::string(kernel) + "'s x").c_str());
  const Planes p = planes_of(x, kernel);
  const Shape channels{p.c};
  require_like(gamma, channels, kernel, "gamma");
  require_like(beta, channels, kernel, "beta");
  require_like(running_mean, channels, kernel, "running_mean");
  require_like(running_var, channels, kernel, "running_var");
  require_like(y, x.shape(), kernel, "y");
  return p;
}

// Calls f(first, last) for blocks of channels in parallel.
template <class F>
void for_channels(const Planes& p, F&& f) {
  // A block should hold some tens of thousands of elements before a task is worth its overhead.
  const std::int64_t grain = std::max<std::int64_t>(1, (1 << 15) / std::max<std::int64_t>(1, p.per_channel()));
  isolated_parallel_for(tbb::blocked_range<std::int64_t>(0, p.c, grain),
                        [&](const tbb::blocked_range<std::int64_t>& channels) { f(channels.begin(), channels.end()); });
}

// The float partial sums of a block, and the most elements of a plane summed in float (see the
// top of the file).
constexpr std::int64_t kLanes = 16;
constexpr std::int64_t kBlock = 1024;

// term(0) + ... + term(n - 1) for n <= kBlock, in kLanes float partial sums folded pairwise.
template <class Term>
double block_sum(std::int64_t n, const Term& term) {
  float lanes[kLanes] = {};
  std::int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] += term(k + l);
  }
  for (; k < n; ++k) lanes[k % kLanes] += term(k);
  for (std::int64_t width = kLanes / 2; width > 0; width /= 2) {
    for (std::int64_t l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return static_cast<double>(lanes[0]);
}

// The sum of term(at) over the elements of channel ch, `at` being an element's index in the NCHW
// tensors: plane by plane, block by block.
template <class Term>
double channel_sum(const Planes& p, std::int64_t ch, const Term& term) {
  double sum = 0;
  for (std::int64_t i = 0; i < p.n; ++i) {
    const std::int64_t offset = p.offset(i, ch);
    for (std::int64_t start = 0; start < p.hw; start += kBlock) {
      const std::int64_t base = offset + start;
      sum += block_sum(std::min(kBlock, p.hw - start), [&](std::int64_t k) { return term(base + k); });
    }
  }
  return sum;
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
  if (NchwCopies::needed({&x, &y})) {
    NchwCopies nchw;
    batch_norm_forward_training(nchw.in(x), gamma, beta, running_mean, running_var, momentum, eps, nchw.out(y),
                                saved_mean, saved_invstd);
    nchw.write_back();
    return;
  }
  constexpr const char* kernel = "batch_norm_forward_training";
  const Planes p = check_forward(kernel, x, gamma, beta, running_mean, running_var, y);
  const Shape channels{p.c};
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
      // The channel is a few hundred KiB at most in the models we train, so the second pass (and
      // the affine one) reads it from cache.
      const double mean = channel_sum(p, ch, [&](std::int64_t at) { return xp[at]; }) / static_cast<double>(m);
      const auto mean_f = static_cast<float>(mean);
      const double squares = channel_sum(p, ch, [&](std::int64_t at) {
        const float d = xp[at] - mean_f;
        return d * d;
      });
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
  if (NchwCopies::needed({&x, &y})) {
    NchwCopies nchw;
    batch_norm_forward_inference(nchw.in(x), gamma, beta, running_mean, running_var, eps, nchw.out(y));
    nchw.write_back();
    return;
  }
  const Planes p = check_forward("batch_norm_forward_inference", x, gamma, beta, running_mean, running_var, y);

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
  if (NchwCopies::needed({&x, &dy, &dx})) {
    NchwCopies nchw;
    batch_norm_backward(nchw.in(x), nchw.in(dy), gamma, saved_mean, saved_invstd, nchw.out(dx), dgamma, dbeta);
    nchw.write_back();
    return;
  }
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
      const double invstd = static_cast<double>(si[ch]);
      // sum(dy) and sum(dy * xhat), xhat = (x - mean) * invstd: the gradients of beta and gamma,
      // and the two projections the input gradient removes. invstd is taken out of the sum.
      const auto mean_f = sm[ch];
      const double sum_dy = channel_sum(p, ch, [&](std::int64_t at) { return dyp[at]; });
      const double sum_dy_xhat =
          invstd * channel_sum(p, ch, [&](std::int64_t at) { return dyp[at] * (xp[at] - mean_f); });
      if (dg != nullptr) dg[ch] += static_cast<float>(sum_dy_xhat);
      if (db != nullptr) db[ch] += static_cast<float>(sum_dy);
      if (dxp == nullptr) continue;
      // dx = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
      //    = scale * dy - centred_scale * (x - mean) - shift, with the coefficients in double and
      // the per-element work in float.
      const double scale = static_cast<double>(g[ch]) * invstd;
      const auto scale_f = static_cast<float>(scale);
      const auto centred_scale = static_cast<float>(scale * invstd * sum_dy_xhat / m);
      const auto shift = static_cast<float>(scale * sum_dy / m);
      for (std::int64_t i = 0; i < p.n; ++i) {
        const float* in = xp + p.offset(i, ch);
        const float* grad = dyp + p.offset(i, ch);
        float* out = dxp + p.offset(i, ch);
        for (std::int64_t k = 0; k < p.hw; ++k) out[k] = scale_f * grad[k] - centred_scale * (in[k] - mean_f) - shift;
      }
    }
  });
}

}  // namespace stoke::nn
