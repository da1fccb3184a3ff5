// CpuBackend's convolution: im2col + OpenBLAS sgemm per image and group (Caffe's scheme), a
// direct loop for depthwise convolutions, threaded with oneTBB across images.
//
// Per image and group, with K = Cin/G * k * k and P = Ho * Wo:
//   forward          y[Cout/G x P]  = w[Cout/G x K] * col[K x P]           (+ b)
//   backward data    col[K x P]     = w^T * dy[Cout/G x P], then col2im into dx
//   backward filter  dw[Cout/G x K] += dy * col^T
// A 1x1 convolution with stride 1 and no padding needs no im2col: the image is its own column
// matrix. Depthwise convolutions (one input channel per group) would be GEMMs of one row, so they
// run as plain loops instead.
#include <cblas.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu_backend.hpp"

namespace stoke::gpu::nn {
namespace {

using Index = std::int64_t;

// The sizes of one convolution call, derived once from the geometry and the tensors' shapes.
struct ConvDims {
  Index n, in_c, h, w, out_c, ho, wo;
  Index groups, in_per_group, out_per_group;
  Index k, stride, pad, dilation;
  Index col_rows;  // K = in_per_group * k * k
  Index plane;     // P = ho * wo
  Index in_plane;  // h * w

  ConvDims(const Conv2dGeometry& g, const Shape& x_shape, const Shape& y_shape)
      : n(x_shape[0]),
        in_c(x_shape[1]),
        h(x_shape[2]),
        w(x_shape[3]),
        out_c(y_shape[1]),
        ho(y_shape[2]),
        wo(y_shape[3]),
        groups(g.groups),
        in_per_group(in_c / g.groups),
        out_per_group(out_c / g.groups),
        k(g.kernel),
        stride(g.stride),
        pad(g.padding),
        dilation(g.dilation),
        col_rows(in_per_group * k * k),
        plane(ho * wo),
        in_plane(h * w) {}

  bool pointwise() const noexcept { return k == 1 && stride == 1 && pad == 0; }
  bool depthwise() const noexcept { return in_per_group == 1 && groups > 1; }

  // The output columns [lo, hi) whose input column ox * stride - pad + offset lies inside [0, w):
  // the rest read padding. offset is kx * dilation.
  void valid_columns(Index offset, Index& lo, Index& hi) const noexcept {
    const Index first = pad - offset;  // ox * stride >= first
    lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    const Index last = w - 1 + pad - offset;  // ox * stride <= last
    hi = last < 0 ? 0 : last / stride + 1;
    lo = std::min(lo, wo);
    hi = std::clamp(hi, lo, wo);
  }
};

// The column matrix of `channels` input planes starting at `x`: row (c, ky, kx), column (oy, ox).
void im2col(const ConvDims& d, const float* x, Index channels, float* col) {
  for (Index c = 0; c < channels; ++c) {
    const float* plane = x + c * d.in_plane;
    for (Index ky = 0; ky < d.k; ++ky) {
      for (Index kx = 0; kx < d.k; ++kx) {
        float* row = col + ((c * d.k + ky) * d.k + kx) * d.plane;
        Index lo = 0, hi = 0;
        d.valid_columns(kx * d.dilation, lo, hi);
        const Index x_offset = kx * d.dilation - d.pad;
        for (Index oy = 0; oy < d.ho; ++oy) {
          float* out = row + oy * d.wo;
          const Index iy = oy * d.stride - d.pad + ky * d.dilation;
          if (iy < 0 || iy >= d.h) {
            std::fill(out, out + d.wo, 0.0f);
            continue;
          }
          std::fill(out, out + lo, 0.0f);
          if (lo < hi) {
            const float* in = plane + iy * d.w + lo * d.stride + x_offset;  // the input of column lo
            if (d.stride == 1) {
              std::copy(in, in + (hi - lo), out + lo);
            } else {
              for (Index j = 0; j < hi - lo; ++j) out[lo + j] = in[j * d.stride];
            }
          }
          std::fill(out + hi, out + d.wo, 0.0f);
        }
      }
    }
  }
}

// The adjoint of im2col: adds each column entry into the input cell it was read from. `x` must be
// zeroed (or hold what the sum should start from).
void col2im(const ConvDims& d, const float* col, Index channels, float* x) {
  for (Index c = 0; c < channels; ++c) {
    float* plane = x + c * d.in_plane;
    for (Index ky = 0; ky < d.k; ++ky) {
      for (Index kx = 0; kx < d.k; ++kx) {
        const float* row = col + ((c * d.k + ky) * d.k + kx) * d.plane;
        Index lo = 0, hi = 0;
        d.valid_columns(kx * d.dilation, lo, hi);
        const Index x_offset = kx * d.dilation - d.pad;
        for (Index oy = 0; oy < d.ho; ++oy) {
          const Index iy = oy * d.stride - d.pad + ky * d.dilation;
          if (iy < 0 || iy >= d.h || lo >= hi) continue;
          const float* in = row + oy * d.wo + lo;
          float* out = plane + iy * d.w + lo * d.stride + x_offset;
          for (Index j = 0; j < hi - lo; ++j) out[j * d.stride] += in[j];
        }
      }
    }
  }
}

// C[m x n] = alpha op(A) op(B) + beta C, all row-major and packed.
void gemm(bool trans_a, bool trans_b, Index m, Index n, Index k, const float* a, const float* b, float beta, float* c) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a,
              static_cast<blasint>(trans_a ? m : k), b, static_cast<blasint>(trans_b ? k : n), beta, c,
              static_cast<blasint>(n));
}

// A per-thread column buffer, grown on demand and reused across images and calls of a kernel.
class ColumnScratch {
 public:
  float* get(std::size_t count) {
    std::vector<float>& buffer = buffers_.local();
    if (buffer.size() < count) buffer.resize(count);
    return buffer.data();
  }

 private:
  tbb::enumerable_thread_specific<std::vector<float>> buffers_;
};

// ---- depthwise: output channel oc reads input channel oc / multiplier, one k x k filter.

// Calls f(out, in, count, tap) for each kernel tap and output row: the `count` outputs from
// plane offset `out` on (stride 1) meet the inputs from plane offset `in` on (stride `stride`).
template <class F>
void for_each_tap(const ConvDims& d, F&& f) {
  for (Index ky = 0; ky < d.k; ++ky) {
    for (Index kx = 0; kx < d.k; ++kx) {
      Index lo = 0, hi = 0;
      d.valid_columns(kx * d.dilation, lo, hi);
      if (lo >= hi) continue;
      const Index x_offset = kx * d.dilation - d.pad;
      for (Index oy = 0; oy < d.ho; ++oy) {
        const Index iy = oy * d.stride - d.pad + ky * d.dilation;
        if (iy < 0 || iy >= d.h) continue;
        f(oy * d.wo + lo, iy * d.w + lo * d.stride + x_offset, hi - lo, ky * d.k + kx);
      }
    }
  }
}

void depthwise_forward(const ConvDims& d, const float* x, const float* w, const float* b, float* y) {
  const Index multiplier = d.out_per_group;
  tbb::parallel_for(tbb::blocked_range<Index>(0, d.n * d.out_c), [&](const tbb::blocked_range<Index>& r) {
    for (Index i = r.begin(); i != r.end(); ++i) {
      const Index oc = i % d.out_c;
      const float* in = x + (i / d.out_c * d.in_c + oc / multiplier) * d.in_plane;
      const float* filter = w + oc * d.k * d.k;
      float* out = y + i * d.plane;
      std::fill(out, out + d.plane, b != nullptr ? b[oc] : 0.0f);
      for_each_tap(d, [&](Index out_at, Index in_at, Index count, Index tap) {
        const float weight = filter[tap];
        const float* src = in + in_at;
        float* dst = out + out_at;
        for (Index j = 0; j < count; ++j) dst[j] += weight * src[j * d.stride];
      });
    }
  });
}

void depthwise_backward_data(const ConvDims& d, const float* dy, const float* w, float* dx) {
  const Index multiplier = d.out_per_group;
  // One task per input plane: it gathers from each of its `multiplier` output channels.
  tbb::parallel_for(tbb::blocked_range<Index>(0, d.n * d.in_c), [&](const tbb::blocked_range<Index>& r) {
    for (Index i = r.begin(); i != r.end(); ++i) {
      const Index image = i / d.in_c, c = i % d.in_c;
      float* out = dx + i * d.in_plane;
      std::fill(out, out + d.in_plane, 0.0f);
      for (Index oc = c * multiplier; oc < (c + 1) * multiplier; ++oc) {
        const float* grad = dy + (image * d.out_c + oc) * d.plane;
        const float* filter = w + oc * d.k * d.k;
        for_each_tap(d, [&](Index out_at, Index in_at, Index count, Index tap) {
          const float weight = filter[tap];
          const float* src = grad + out_at;
          float* dst = out + in_at;
          for (Index j = 0; j < count; ++j) dst[j * d.stride] += weight * src[j];
        });
      }
    }
  });
}

void depthwise_backward_filter(const ConvDims& d, const float* x, const float* dy, float* dw) {
  const Index multiplier = d.out_per_group;
  // One task per output channel: it owns its filter's gradient, so there is nothing to reduce.
  tbb::parallel_for(tbb::blocked_range<Index>(0, d.out_c), [&](const tbb::blocked_range<Index>& r) {
    std::vector<double> taps(static_cast<std::size_t>(d.k * d.k));
    for (Index oc = r.begin(); oc != r.end(); ++oc) {
      std::fill(taps.begin(), taps.end(), 0.0);
      for (Index image = 0; image < d.n; ++image) {
        const float* in = x + (image * d.in_c + oc / multiplier) * d.in_plane;
        const float* grad = dy + (image * d.out_c + oc) * d.plane;
        for_each_tap(d, [&](Index out_at, Index in_at, Index count, Index tap) {
          const float* src = in + in_at;
          const float* g = grad + out_at;
          float sum = 0;
          for (Index j = 0; j < count; ++j) sum += g[j] * src[j * d.stride];
          taps[static_cast<std::size_t>(tap)] += static_cast<double>(sum);
        });
      }
      for (Index t = 0; t < d.k * d.k; ++t)
        dw[oc * d.k * d.k + t] += static_cast<float>(taps[static_cast<std::size_t>(t)]);
    }
  });
}

}  // namespace

void CpuBackend::conv2d_forward(const Conv2dGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
                                const Tensor& y) {
  require_cpu_f32(x, "conv2d_forward's x");
  require_cpu_f32(w, "conv2d_forward's w");
  require_cpu_f32(y, "conv2d_forward's y");
  if (b.defined()) require_cpu_f32(b, "conv2d_forward's b");
  const ConvDims d(g, x.shape(), y.shape());
  const float* x_data = x.data_as<const float>();
  const float* w_data = w.data_as<const float>();
  const float* b_data = b.defined() ? b.data_as<const float>() : nullptr;
  float* y_data = y.data_as<float>();
  if (d.depthwise()) {
    depthwise_forward(d, x_data, w_data, b_data, y_data);
    return;
  }

  ColumnScratch scratch;
  tbb::parallel_for(tbb::blocked_range<Index>(0, d.n), [&](const tbb::blocked_range<Index>& r) {
    float* col = d.pointwise() ? nullptr : scratch.get(static_cast<std::size_t>(d.col_rows * d.plane));
    for (Index image = r.begin(); image != r.end(); ++image) {
      for (Index group = 0; group < d.groups; ++group) {
        const float* in = x_data + (image * d.in_c + group * d.in_per_group) * d.in_plane;
        if (!d.pointwise()) im2col(d, in, d.in_per_group, col);
        float* out = y_data + (image * d.out_c + group * d.out_per_group) * d.plane;
        gemm(false, false, d.out_per_group, d.plane, d.col_rows, w_data + group * d.out_per_group * d.col_rows,
             d.pointwise() ? in : col, 0.0f, out);
      }
      if (b_data != nullptr) {
        for (Index oc = 0; oc < d.out_c; ++oc) {
          float* out = y_data + (image * d.out_c + oc) * d.plane;
          const float bias = b_data[oc];
          for (Index p = 0; p < d.plane; ++p) out[p] += bias;
        }
      }
    }
  });
}

void CpuBackend::conv2d_backward_data(const Conv2dGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  require_cpu_f32(dy, "conv2d_backward_data's dy");
  require_cpu_f32(w, "conv2d_backward_data's w");
  require_cpu_f32(dx, "conv2d_backward_data's dx");
  const ConvDims d(g, dx.shape(), dy.shape());
  const float* dy_data = dy.data_as<const float>();
  const float* w_data = w.data_as<const float>();
  float* dx_data = dx.data_as<float>();
  if (d.depthwise()) {
    depthwise_backward_data(d, dy_data, w_data, dx_data);
    return;
  }

  ColumnScratch scratch;
  tbb::parallel_for(tbb::blocked_range<Index>(0, d.n), [&](const tbb::blocked_range<Index>& r) {
    float* col = d.pointwise() ? nullptr : scratch.get(static_cast<std::size_t>(d.col_rows * d.plane));
    for (Index image = r.begin(); image != r.end(); ++image) {
      for (Index group = 0; group < d.groups; ++group) {
        const float* grad = dy_data + (image * d.out_c + group * d.out_per_group) * d.plane;
        float* out = dx_data + (image * d.in_c + group * d.in_per_group) * d.in_plane;
        const float* filter = w_data + group * d.out_per_group * d.col_rows;
        if (d.pointwise()) {
          gemm(true, false, d.col_rows, d.plane, d.out_per_group, filter, grad, 0.0f, out);
        } else {
          gemm(true, false, d.col_rows, d.plane, d.out_per_group, filter, grad, 0.0f, col);
          std::fill(out, out + d.in_per_group * d.in_plane, 0.0f);
          col2im(d, col, d.in_per_group, out);
        }
      }
    }
  });
}

void CpuBackend::conv2d_backward_filter(const Conv2dGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                                        const Tensor& db) {
  require_cpu_f32(x, "conv2d_backward_filter's x");
  require_cpu_f32(dy, "conv2d_backward_filter's dy");
  require_cpu_f32(dw, "conv2d_backward_filter's dw");
  if (db.defined()) require_cpu_f32(db, "conv2d_backward_filter's db");
  const ConvDims d(g, x.shape(), dy.shape());
  const float* x_data = x.data_as<const float>();
  const float* dy_data = dy.data_as<const float>();
  float* dw_data = dw.data_as<float>();

  if (db.defined()) {
    float* db_data = db.data_as<float>();
    tbb::parallel_for(tbb::blocked_range<Index>(0, d.out_c), [&](const tbb::blocked_range<Index>& r) {
      for (Index oc = r.begin(); oc != r.end(); ++oc) {
        double sum = 0;
        for (Index image = 0; image < d.n; ++image) {
          const float* grad = dy_data + (image * d.out_c + oc) * d.plane;
          float plane_sum = 0;
          for (Index p = 0; p < d.plane; ++p) plane_sum += grad[p];
          sum += static_cast<double>(plane_sum);
        }
        db_data[oc] += static_cast<float>(sum);
      }
    });
  }

  if (d.depthwise()) {
    depthwise_backward_filter(d, x_data, dy_data, dw_data);
    return;
  }

  // The batch is cut into a fixed number of chunks, each summing its images' gradients into a
  // buffer of its own; the buffers are then added in chunk order. Which thread ran which chunk
  // does not matter, so the result is the same on every run (no race, no scheduling noise).
  const Index weight_count = d.out_c * d.col_rows;
  const Index chunks = std::clamp<Index>(tbb::this_task_arena::max_concurrency(), 1, d.n);
  std::vector<float> partial(static_cast<std::size_t>(chunks * weight_count), 0.0f);
  ColumnScratch scratch;
  tbb::parallel_for(
      tbb::blocked_range<Index>(0, chunks, 1),
      [&](const tbb::blocked_range<Index>& r) {
        float* col = d.pointwise() ? nullptr : scratch.get(static_cast<std::size_t>(d.col_rows * d.plane));
        for (Index chunk = r.begin(); chunk != r.end(); ++chunk) {
          float* sum = partial.data() + chunk * weight_count;
          for (Index image = d.n * chunk / chunks; image < d.n * (chunk + 1) / chunks; ++image) {
            for (Index group = 0; group < d.groups; ++group) {
              const float* in = x_data + (image * d.in_c + group * d.in_per_group) * d.in_plane;
              if (!d.pointwise()) im2col(d, in, d.in_per_group, col);
              const float* grad = dy_data + (image * d.out_c + group * d.out_per_group) * d.plane;
              gemm(false, true, d.out_per_group, d.col_rows, d.plane, grad, d.pointwise() ? in : col, 1.0f,
                   sum + group * d.out_per_group * d.col_rows);
            }
          }
        }
      },
      tbb::simple_partitioner());
  tbb::parallel_for(tbb::blocked_range<Index>(0, weight_count, 4096), [&](const tbb::blocked_range<Index>& r) {
    for (Index i = r.begin(); i != r.end(); ++i) {
      float total = 0;
      for (Index chunk = 0; chunk < chunks; ++chunk)
        total += partial[static_cast<std::size_t>(chunk * weight_count + i)];
      dw_data[i] += total;
    }
  });
}

}  // namespace stoke::gpu::nn
