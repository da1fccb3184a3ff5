// CpuBackend's pooling kernels: max pooling over square windows and global average pooling.
// Every (item, channel) plane is independent, so oneTBB splits the work by planes.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "cpu_backend.hpp"

namespace stoke::nn {
namespace {

void require_image(const Tensor& t, const char* what) {
  require_cpu_f32(t, what);
  if (t.rank() != 4) {
    throw std::invalid_argument(std::string("CpuBackend: ") + what + " is " + t.describe() + "; expected {N, C, H, W}");
  }
}

Shape pooled_shape(const Pool2dGeometry& g, const Tensor& x) {
  return {x.dim(0), x.dim(1), g.output_size(x.dim(2)), g.output_size(x.dim(3))};
}

// Calls body(plane) for each of `planes` planes, in parallel.
template <class Body>
void for_planes(std::int64_t planes, const Body& body) {
  isolated_parallel_for(tbb::blocked_range<std::int64_t>(0, planes),
                        [&](const tbb::blocked_range<std::int64_t>& range) {
                          for (std::int64_t plane = range.begin(); plane < range.end(); ++plane) body(plane);
                        });
}

// The index in its plane of the maximum of output cell (oh, ow)'s window, -1 when the window
// holds no real cell. Padded cells never take part. The first maximum in row-major scan order
// wins a tie; a NaN wins over numbers, as in PyTorch, so it reaches the output.
std::int64_t window_argmax(const Pool2dGeometry& g, const float* plane, std::int64_t height, std::int64_t width,
                           std::int64_t oh, std::int64_t ow) {
  const std::int64_t h0 = oh * g.stride - g.padding;
  const std::int64_t w0 = ow * g.stride - g.padding;
  const std::int64_t h_end = std::min(h0 + g.kernel, height);
  const std::int64_t w_end = std::min(w0 + g.kernel, width);
  std::int64_t best_at = -1;
  float best = -std::numeric_limits<float>::infinity();
  for (std::int64_t h = std::max<std::int64_t>(h0, 0); h < h_end; ++h) {
    for (std::int64_t w = std::max<std::int64_t>(w0, 0); w < w_end; ++w) {
      const float v = plane[h * width + w];
      if (best_at < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
        best = v;
        best_at = h * width + w;
      }
    }
  }
  return best_at;
}

// `yes ? a : b` by bit masks: GCC compiles the plain conditional on floats to a branch, which
// mispredicts about half the time when it picks between activations.
float pick(bool yes, float a, float b) {
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(yes);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) & mask) | (std::bit_cast<std::uint32_t>(b) & ~mask));
}

// Whether v takes over from `best` in window_argmax's scan: a larger value, or the first NaN.
bool takes_over(float v, float best) { return (v > best) | (std::isnan(v) & !std::isnan(best)); }

// The common 2x2, stride 2, unpadded window, the same rule as window_argmax without its loops and
// bounds: which of a, b (top row) and c, d (bottom row) wins, 0 to 3 in scan order. A tournament
// (each row's winner, then the bottom one only if it takes over from the top one) picks what the
// scan picks: the first NaN, else the first maximum. No branches, as in pick.
struct Winner {
  float value;
  int at;
};

Winner argmax_2x2(float a, float b, float c, float d) {
  const bool top_b = takes_over(b, a);
  const bool bottom_d = takes_over(d, c);
  const float top = pick(top_b, b, a);
  const float bottom = pick(bottom_d, d, c);
  const bool bottom_wins = takes_over(bottom, top);
  return {pick(bottom_wins, bottom, top), bottom_wins ? 2 + static_cast<int>(bottom_d) : static_cast<int>(top_b)};
}

bool is_plain_2x2(const Pool2dGeometry& g) { return g.kernel == 2 && g.stride == 2 && g.padding == 0; }

}  // namespace

void CpuBackend::max_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y) {
  if (NchwCopies::needed({&x, &y})) {
    NchwCopies nchw;
    max_pool2d_forward(g, nchw.in(x), nchw.out(y));
    nchw.write_back();
    return;
  }
  require_image(x, "max_pool2d_forward's x");
  require_image(y, "max_pool2d_forward's y");
  require_cpu_shape(y, pooled_shape(g, x), "max_pool2d_forward's y");
  const std::int64_t height = x.dim(2), width = x.dim(3);
  const std::int64_t out_h = y.dim(2), out_w = y.dim(3);
  const float* in = x.data_as<const float>();
  float* out = y.data_as<float>();
  const bool plain = is_plain_2x2(g);
  for_planes(x.dim(0) * x.dim(1), [&](std::int64_t p) {
    const float* plane = in + p * height * width;
    float* pooled = out + p * out_h * out_w;
    if (plain) {
      for (std::int64_t oh = 0; oh < out_h; ++oh) {
        const float* top = plane + 2 * oh * width;
        const float* bottom = top + width;
        for (std::int64_t ow = 0; ow < out_w; ++ow) {
          const std::int64_t w = 2 * ow;
          pooled[oh * out_w + ow] = argmax_2x2(top[w], top[w + 1], bottom[w], bottom[w + 1]).value;
        }
      }
      return;
    }
    for (std::int64_t oh = 0; oh < out_h; ++oh) {
      for (std::int64_t ow = 0; ow < out_w; ++ow) {
        const std::int64_t at = window_argmax(g, plane, height, width, oh, ow);
        pooled[oh * out_w + ow] = at < 0 ? -std::numeric_limits<float>::infinity() : plane[at];
      }
    }
  });
}

void CpuBackend::max_pool2d_backward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                                     const Tensor& dx) {
  if (NchwCopies::needed({&x, &y, &dy, &dx})) {
    NchwCopies nchw;
    max_pool2d_backward(g, nchw.in(x), nchw.in(y), nchw.in(dy), nchw.out(dx));
    nchw.write_back();
    return;
  }
  require_image(x, "max_pool2d_backward's x");
  require_image(dy, "max_pool2d_backward's dy");
  require_image(dx, "max_pool2d_backward's dx");
  const Shape pooled = pooled_shape(g, x);
  if (y.defined()) require_cpu_shape(y, pooled, "max_pool2d_backward's y");
  require_cpu_shape(dy, pooled, "max_pool2d_backward's dy");
  require_cpu_shape(dx, x.shape(), "max_pool2d_backward's dx");
  // The winners are found again from x, by the same scan as forward: that settles ties exactly as
  // forward did, where matching y's values could not.
  const std::int64_t height = x.dim(2), width = x.dim(3);
  const std::int64_t out_h = dy.dim(2), out_w = dy.dim(3);
  const float* in = x.data_as<const float>();
  const float* grad_out = dy.data_as<const float>();
  float* grad_in = dx.data_as<float>();
  const bool plain = is_plain_2x2(g);
  for_planes(x.dim(0) * x.dim(1), [&](std::int64_t p) {
    const float* plane = in + p * height * width;
    const float* grad_pooled = grad_out + p * out_h * out_w;
    float* grad_plane = grad_in + p * height * width;
    if (plain) {
      // The windows tile the plane without overlapping, so every cell of a window is written
      // (the gradient or zero, by selects again); only an odd last row or column needs the fill.
      if (height % 2 != 0 || width % 2 != 0) std::fill(grad_plane, grad_plane + height * width, 0.0f);
      for (std::int64_t oh = 0; oh < out_h; ++oh) {
        const float* top = plane + 2 * oh * width;
        const float* bottom = top + width;
        float* grad_top = grad_plane + 2 * oh * width;
        float* grad_bottom = grad_top + width;
        for (std::int64_t ow = 0; ow < out_w; ++ow) {
          const std::int64_t w = 2 * ow;
          const int at = argmax_2x2(top[w], top[w + 1], bottom[w], bottom[w + 1]).at;
          const float grad = grad_pooled[oh * out_w + ow];
          grad_top[w] = pick(at == 0, grad, 0.0f);
          grad_top[w + 1] = pick(at == 1, grad, 0.0f);
          grad_bottom[w] = pick(at == 2, grad, 0.0f);
          grad_bottom[w + 1] = pick(at == 3, grad, 0.0f);
        }
      }
      return;
    }
    std::fill(grad_plane, grad_plane + height * width, 0.0f);
    for (std::int64_t oh = 0; oh < out_h; ++oh) {
      for (std::int64_t ow = 0; ow < out_w; ++ow) {
        const std::int64_t at = window_argmax(g, plane, height, width, oh, ow);
        // Overlapping windows may pick the same cell: their gradients sum.
        if (at >= 0) grad_plane[at] += grad_pooled[oh * out_w + ow];
      }
    }
  });
}

void CpuBackend::global_avg_pool_forward(const Tensor& x, const Tensor& y) {
  if (NchwCopies::needed({&x})) {
    NchwCopies nchw;
    global_avg_pool_forward(nchw.in(x), y);
    nchw.write_back();
    return;
  }
  require_image(x, "global_avg_pool_forward's x");
  require_cpu_f32(y, "global_avg_pool_forward's y");
  require_cpu_shape(y, {x.dim(0), x.dim(1)}, "global_avg_pool_forward's y");
  const std::int64_t area = x.dim(2) * x.dim(3);
  const float* in = x.data_as<const float>();
  float* out = y.data_as<float>();
  for_planes(x.dim(0) * x.dim(1), [&](std::int64_t p) {
    // Summed in double: a 56x56 plane of floats loses digits otherwise.
    double sum = 0;
    const float* plane = in + p * area;
    for (std::int64_t i = 0; i < area; ++i) sum += static_cast<double>(plane[i]);
    out[p] = area > 0 ? static_cast<float>(sum / static_cast<double>(area)) : 0.0f;
  });
}

void CpuBackend::global_avg_pool_backward(const Tensor& dy, const Tensor& dx) {
  if (NchwCopies::needed({&dx})) {
    NchwCopies nchw;
    global_avg_pool_backward(dy, nchw.out(dx));
    nchw.write_back();
    return;
  }
  require_cpu_f32(dy, "global_avg_pool_backward's dy");
  require_image(dx, "global_avg_pool_backward's dx");
  require_cpu_shape(dy, {dx.dim(0), dx.dim(1)}, "global_avg_pool_backward's dy");
  const std::int64_t area = dx.dim(2) * dx.dim(3);
  const float* grad_out = dy.data_as<const float>();
  float* grad_in = dx.data_as<float>();
  for_planes(dx.dim(0) * dx.dim(1), [&](std::int64_t p) {
    const float share = grad_out[p] / static_cast<float>(area);
    std::fill(grad_in + p * area, grad_in + (p + 1) * area, share);
  });
}

}  // namespace stoke::nn
