// CpuBackend's pooling kernels: max pooling over square windows and global average pooling.
// Every (item, channel) plane is independent, so oneTBB splits the work by planes.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "cpu_backend.hpp"

namespace stoke::gpu::nn {
namespace {

void require_image(const Tensor& t, const char* what) {
  require_cpu_f32(t, what);
  if (t.rank() != 4) {
    throw std::invalid_argument(std::string("CpuBackend: ") + what + " is " + t.describe() + "; expected {N, C, H, W}");
  }
}

void require_shape(const Tensor& t, const Shape& expected, const char* what) {
  if (t.shape() != expected) {
    throw std::invalid_argument(std::string("CpuBackend: ") + what + " is " + t.describe() + "; expected " +
                                to_string(expected));
  }
}

Shape pooled_shape(const Pool2dGeometry& g, const Tensor& x) {
  return {x.dim(0), x.dim(1), g.output_size(x.dim(2)), g.output_size(x.dim(3))};
}

// Calls body(plane) for each of `planes` planes, in parallel.
template <class Body>
void for_planes(std::int64_t planes, const Body& body) {
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, planes), [&](const tbb::blocked_range<std::int64_t>& range) {
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

}  // namespace

void CpuBackend::max_pool2d_forward(const Pool2dGeometry& g, const Tensor& x, const Tensor& y) {
  require_image(x, "max_pool2d_forward's x");
  require_image(y, "max_pool2d_forward's y");
  require_shape(y, pooled_shape(g, x), "max_pool2d_forward's y");
  const std::int64_t height = x.dim(2), width = x.dim(3);
  const std::int64_t out_h = y.dim(2), out_w = y.dim(3);
  const float* in = x.data_as<const float>();
  float* out = y.data_as<float>();
  for_planes(x.dim(0) * x.dim(1), [&](std::int64_t p) {
    const float* plane = in + p * height * width;
    float* pooled = out + p * out_h * out_w;
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
  require_image(x, "max_pool2d_backward's x");
  require_image(dy, "max_pool2d_backward's dy");
  require_image(dx, "max_pool2d_backward's dx");
  const Shape pooled = pooled_shape(g, x);
  if (y.defined()) require_shape(y, pooled, "max_pool2d_backward's y");
  require_shape(dy, pooled, "max_pool2d_backward's dy");
  require_shape(dx, x.shape(), "max_pool2d_backward's dx");
  // The winners are found again from x, by the same scan as forward: that settles ties exactly as
  // forward did, where matching y's values could not.
  const std::int64_t height = x.dim(2), width = x.dim(3);
  const std::int64_t out_h = dy.dim(2), out_w = dy.dim(3);
  const float* in = x.data_as<const float>();
  const float* grad_out = dy.data_as<const float>();
  float* grad_in = dx.data_as<float>();
  for_planes(x.dim(0) * x.dim(1), [&](std::int64_t p) {
    const float* plane = in + p * height * width;
    const float* grad_pooled = grad_out + p * out_h * out_w;
    float* grad_plane = grad_in + p * height * width;
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
  require_image(x, "global_avg_pool_forward's x");
  require_cpu_f32(y, "global_avg_pool_forward's y");
  require_shape(y, {x.dim(0), x.dim(1)}, "global_avg_pool_forward's y");
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
  require_cpu_f32(dy, "global_avg_pool_backward's dy");
  require_image(dx, "global_avg_pool_backward's dx");
  require_shape(dy, {dx.dim(0), dx.dim(1)}, "global_avg_pool_backward's dy");
  const std::int64_t area = dx.dim(2) * dx.dim(3);
  const float* grad_out = dy.data_as<const float>();
  float* grad_in = dx.data_as<float>();
  for_planes(dx.dim(0) * dx.dim(1), [&](std::int64_t p) {
    const float share = grad_out[p] / static_cast<float>(area);
    std::fill(grad_in + p * area, grad_in + (p + 1) * area, share);
  });
}

}  // namespace stoke::gpu::nn
