// CpuBackend's convolution: im2col + OpenBLAS sgemm per tile of images and group (Caffe's scheme,
// with several images side by side in one GEMM), a direct loop for depthwise convolutions,
// threaded with oneTBB across tiles.
//
// Per tile of T images and group, with K = Cin/G * k * k, P = Ho * Wo and N = T * P:
//   forward          y[Cout/G x N]  = w[Cout/G x K] * col[K x N]           (+ b)
//   backward data    col[K x N]     = w^T * dy[Cout/G x N], then col2im into dx
//   backward filter  dw[Cout/G x K] += dy * col^T
// Image t of a tile owns columns [t * P, (t + 1) * P) of col and of the tile's y or dy matrix,
// which are copied from or to the NCHW planes when T > 1. Late layers have small planes (4x4 in a
// small CNN): one image's GEMM would be a thin [Cout x 16] product that OpenBLAS runs far below
// its peak, and the filter gradient would be read and written back once per image; a tile puts
// enough columns in one GEMM (see tile_images). A tile of one image needs no copies, and a 1x1
// convolution with stride 1 and no padding then needs no im2col either: the image is its own
// column matrix. Depthwise convolutions (one input channel per group) would be GEMMs of one row,
// so they run as plain loops instead.
#include <cblas.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cpu_backend.hpp"

namespace stoke::nn {
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
  // Stride 1 and "same" padding (2 * pad == dilation * (k - 1)): the output is the input's size,
  // and each row of col is the input plane shifted by a constant (see im2col_shifted).
  bool same_size() const noexcept { return stride == 1 && ho == h && wo == w; }
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

// The output rows [first, last) whose input row oy + offset lies inside [0, h) (same_size only).
void valid_rows(const ConvDims& d, Index offset, Index& first, Index& last) noexcept {
  first = std::clamp<Index>(-offset, 0, d.ho);
  last = std::clamp<Index>(d.h - offset, first, d.ho);
}

// im2col when d.same_size(): row (c, ky, kx) of col is the plane read from a constant shift on,
// so it is one contiguous copy, after which the cells that read padding are zeroed: whole rows at
// the top or bottom, and the few columns at each side that the copy filled from the neighbouring
// rows. The general loop below makes a memcpy and two memset calls per output row instead, which
// dominate on the small planes of late layers.
void im2col_shifted(const ConvDims& d, const float* x, Index channels, float* col, Index ld) {
  for (Index c = 0; c < channels; ++c) {
    const float* plane = x + c * d.in_plane;
    for (Index ky = 0; ky < d.k; ++ky) {
      const Index y_offset = ky * d.dilation - d.pad;
      Index first = 0, last = 0;
      valid_rows(d, y_offset, first, last);
      for (Index kx = 0; kx < d.k; ++kx) {
        float* row = col + ((c * d.k + ky) * d.k + kx) * ld;
        Index lo = 0, hi = 0;
        d.valid_columns(kx * d.dilation, lo, hi);
        const Index shift = y_offset * d.w + kx * d.dilation - d.pad;  // input index - output index
        // The copy, clipped to the plane: what it leaves out lies in the columns zeroed below.
        const Index begin = std::max(first * d.wo, -shift);
        const Index end = std::min(last * d.wo, d.in_plane - shift);
        std::fill(row, row + first * d.wo, 0.0f);
        if (begin < end) std::copy(plane + begin + shift, plane + end + shift, row + begin);
        std::fill(row + last * d.wo, row + d.plane, 0.0f);
        for (Index oy = first; oy < last; ++oy) {
          float* out = row + oy * d.wo;
          for (Index ox = 0; ox < lo; ++ox) out[ox] = 0.0f;
          for (Index ox = hi; ox < d.wo; ++ox) out[ox] = 0.0f;
        }
      }
    }
  }
}

// The column matrix of `channels` input planes starting at `x`: row (c, ky, kx), column (oy, ox).
// Rows are `ld` floats apart (d.plane for an image alone, more when it shares col with a tile).
void im2col(const ConvDims& d, const float* x, Index channels, float* col, Index ld) {
  if (d.same_size()) {
    im2col_shifted(d, x, channels, col, ld);
    return;
  }
  for (Index c = 0; c < channels; ++c) {
    const float* plane = x + c * d.in_plane;
    for (Index ky = 0; ky < d.k; ++ky) {
      for (Index kx = 0; kx < d.k; ++kx) {
        float* row = col + ((c * d.k + ky) * d.k + kx) * ld;
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
void col2im(const ConvDims& d, const float* col, Index ld, Index channels, float* x) {
  for (Index c = 0; c < channels; ++c) {
    float* plane = x + c * d.in_plane;
    for (Index ky = 0; ky < d.k; ++ky) {
      for (Index kx = 0; kx < d.k; ++kx) {
        const float* row = col + ((c * d.k + ky) * d.k + kx) * ld;
        Index lo = 0, hi = 0;
        d.valid_columns(kx * d.dilation, lo, hi);
        const Index x_offset = kx * d.dilation - d.pad;
        for (Index oy = 0; oy < d.ho; ++oy) {
          const Index iy = oy * d.stride - d.pad + ky * d.dilation;
          if (iy < 0 || iy >= d.h || lo >= hi) continue;
          const float* in = row + oy * d.wo + lo;
          float* out = plane + iy * d.w + lo * d.stride + x_offset;
          if (d.stride == 1) {  // a loop the compiler vectorises, unlike the strided one
            for (Index j = 0; j < hi - lo; ++j) out[j] += in[j];
          } else {
            for (Index j = 0; j < hi - lo; ++j) out[j * d.stride] += in[j];
          }
        }
      }
    }
  }
}

// One row-major matrix operand: its first element and the floats between its rows.
struct Matrix {
  const float* data;
  Index ld;
};

// C[m x n] = op(A) op(B) + beta C, row-major; ldc floats between C's rows.
void gemm(bool trans_a, bool trans_b, Index m, Index n, Index k, Matrix a, Matrix b, float beta, float* c, Index ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), 1.0f, a.data,
              static_cast<blasint>(a.ld), b.data, static_cast<blasint>(b.ld), beta, c, static_cast<blasint>(ldc));
}

// Columns per GEMM that OpenBLAS runs near its peak with: with fewer its kernels spend their time
// packing and on edges; with many more, col outgrows the caches (measured on small_cnn's layers:
// 256 to 1024 run alike, 128 is a third slower).
constexpr Index kTileColumns = 256;
// Tiles per thread at the least, when the batch has images enough: oneTBB then balances the
// tiles across threads, so a core shared with another process slows the step down by its share
// rather than making the other thread wait for it.
constexpr Index kTilesPerThread = 4;

// The threads the work is cut for: the machine's (its cores this process may use), not the
// calling arena's. The cut decides the filter gradient's order of summation, so with the arena's
// a pipeline's --threads would change the trained weights in their last bits; with this, a seed
// gives the same weights whatever thread count runs the step (`stoke train --deterministic`).
Index plan_concurrency() {
  static const Index threads = std::max(1, tbb::info::default_concurrency());
  return threads;
}

// Images per tile: enough for kTileColumns columns, but few enough for kTilesPerThread tiles per
// thread. Depends on the shapes and the machine only, never on scheduling, so the filter
// gradient's order of summation (by tile) is the same on every run.
Index tile_images(const ConvDims& d) {
  const Index wanted = std::max<Index>(1, kTileColumns / std::max<Index>(1, d.plane));
  const Index tiles = kTilesPerThread * plan_concurrency();
  return std::clamp<Index>((d.n + tiles - 1) / tiles, 1, wanted);
}

// The images [first, first + count) of a tile.
struct Tile {
  Index first, count;
};

Tile tile_at(const ConvDims& d, Index tile_size, Index tile) {
  const Index first = tile * tile_size;
  return {first, std::min(tile_size, d.n - first)};
}

// `rows` channel planes (of d.plane floats, from channel `channel` of `channels`) of each image
// of the tile, as one [rows x count * P] matrix, and back.
void gather_planes(const ConvDims& d, const float* nchw, Index channels, Index channel, Index rows, Tile t,
                   float* matrix) {
  const Index ld = t.count * d.plane;
  for (Index i = 0; i < t.count; ++i) {
    for (Index r = 0; r < rows; ++r) {
      const float* src = nchw + ((t.first + i) * channels + channel + r) * d.plane;
      std::copy(src, src + d.plane, matrix + r * ld + i * d.plane);
    }
  }
}

void scatter_planes(const ConvDims& d, const float* matrix, Index channels, Index channel, Index rows, Tile t,
                    float* nchw) {
  const Index ld = t.count * d.plane;
  for (Index i = 0; i < t.count; ++i) {
    for (Index r = 0; r < rows; ++r) {
      const float* src = matrix + r * ld + i * d.plane;
      std::copy(src, src + d.plane, nchw + ((t.first + i) * channels + channel + r) * d.plane);
    }
  }
}

// The column matrix of a tile's images for group `group`: x itself for a single image of a 1x1
// convolution, else im2col into `col`.
Matrix tile_columns(const ConvDims& d, const float* x, Index group, Tile t, float* col) {
  const float* first_image = x + (t.first * d.in_c + group * d.in_per_group) * d.in_plane;
  if (t.count == 1 && d.pointwise()) return {first_image, d.plane};
  const Index ld = t.count * d.plane;
  for (Index i = 0; i < t.count; ++i)
    im2col(d, first_image + i * d.in_c * d.in_plane, d.in_per_group, col + i * d.plane, ld);
  return {col, ld};
}

// `count` floats of scratch from the backend's pool, for one task: a kernel call would otherwise
// allocate (and page-fault in) its column matrices every time. Taken per task rather than kept per
// thread, so a thread that picks up another convolution while it waits (oneTBB may do that) never
// shares a buffer.
class Scratch {
 public:
  Scratch(HostPool& pool, Index count) : block_(pool.allocate(static_cast<std::size_t>(count) * sizeof(float))) {}
  float* data() const noexcept { return static_cast<float*>(block_.get()); }

 private:
  std::shared_ptr<void> block_;
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
  isolated_parallel_for(tbb::blocked_range<Index>(0, d.n * d.out_c), [&](const tbb::blocked_range<Index>& r) {
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
  isolated_parallel_for(tbb::blocked_range<Index>(0, d.n * d.in_c), [&](const tbb::blocked_range<Index>& r) {
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
  isolated_parallel_for(tbb::blocked_range<Index>(0, d.out_c), [&](const tbb::blocked_range<Index>& r) {
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
  if (NchwCopies::needed({&x, &w, &y})) {
    NchwCopies nchw;
    conv2d_forward(g, nchw.in(x), nchw.in(w), b, nchw.out(y));
    nchw.write_back();
    return;
  }
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

  const Index tile_size = tile_images(d);
  const Index tiles = (d.n + tile_size - 1) / tile_size;
  const Index columns = tile_size * d.plane;
  isolated_parallel_for(tbb::blocked_range<Index>(0, tiles, 1), [&](const tbb::blocked_range<Index>& r) {
    const Scratch col_block(*pool_, d.col_rows * columns), out_block(*pool_, d.out_per_group * columns);
    float* col = col_block.data();
    float* out = out_block.data();
    for (Index tile = r.begin(); tile != r.end(); ++tile) {
      const Tile t = tile_at(d, tile_size, tile);
      for (Index group = 0; group < d.groups; ++group) {
        const Matrix cols = tile_columns(d, x_data, group, t, col);
        const Matrix filter{w_data + group * d.out_per_group * d.col_rows, d.col_rows};
        if (t.count == 1) {
          gemm(false, false, d.out_per_group, d.plane, d.col_rows, filter, cols, 0.0f,
               y_data + (t.first * d.out_c + group * d.out_per_group) * d.plane, d.plane);
        } else {
          gemm(false, false, d.out_per_group, cols.ld, d.col_rows, filter, cols, 0.0f, out, cols.ld);
          scatter_planes(d, out, d.out_c, group * d.out_per_group, d.out_per_group, t, y_data);
        }
      }
      if (b_data == nullptr) continue;
      for (Index image = t.first; image < t.first + t.count; ++image) {
        for (Index oc = 0; oc < d.out_c; ++oc) {
          float* plane = y_data + (image * d.out_c + oc) * d.plane;
          const float bias = b_data[oc];
          for (Index p = 0; p < d.plane; ++p) plane[p] += bias;
        }
      }
    }
  });
}

void CpuBackend::conv2d_backward_data(const Conv2dGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  if (NchwCopies::needed({&dy, &w, &dx})) {
    NchwCopies nchw;
    conv2d_backward_data(g, nchw.in(dy), nchw.in(w), nchw.out(dx));
    nchw.write_back();
    return;
  }
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

  const Index tile_size = tile_images(d);
  const Index tiles = (d.n + tile_size - 1) / tile_size;
  const Index columns = tile_size * d.plane;
  isolated_parallel_for(tbb::blocked_range<Index>(0, tiles, 1), [&](const tbb::blocked_range<Index>& r) {
    const Scratch col_block(*pool_, d.col_rows * columns), grad_block(*pool_, d.out_per_group * columns);
    float* col = col_block.data();
    float* grads = grad_block.data();
    for (Index tile = r.begin(); tile != r.end(); ++tile) {
      const Tile t = tile_at(d, tile_size, tile);
      const Index ld = t.count * d.plane;
      for (Index group = 0; group < d.groups; ++group) {
        const Matrix filter{w_data + group * d.out_per_group * d.col_rows, d.col_rows};
        float* out = dx_data + (t.first * d.in_c + group * d.in_per_group) * d.in_plane;
        Matrix grad{dy_data + (t.first * d.out_c + group * d.out_per_group) * d.plane, d.plane};
        if (t.count > 1) {
          gather_planes(d, dy_data, d.out_c, group * d.out_per_group, d.out_per_group, t, grads);
          grad = {grads, ld};
        } else if (d.pointwise()) {
          gemm(true, false, d.col_rows, d.plane, d.out_per_group, filter, grad, 0.0f, out, d.plane);
          continue;
        }
        gemm(true, false, d.col_rows, ld, d.out_per_group, filter, grad, 0.0f, col, ld);
        for (Index i = 0; i < t.count; ++i) {
          float* image = out + i * d.in_c * d.in_plane;
          std::fill(image, image + d.in_per_group * d.in_plane, 0.0f);
          col2im(d, col + i * d.plane, ld, d.in_per_group, image);
        }
      }
    }
  });
}

void CpuBackend::conv2d_backward_filter(const Conv2dGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                                        const Tensor& db) {
  if (NchwCopies::needed({&x, &dy, &dw})) {
    NchwCopies nchw;
    conv2d_backward_filter(g, nchw.in(x), nchw.in(dy), nchw.out(dw), db);
    nchw.write_back();
    return;
  }
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
    isolated_parallel_for(tbb::blocked_range<Index>(0, d.out_c), [&](const tbb::blocked_range<Index>& r) {
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

  // The batch is cut into a fixed number of chunks of whole tiles, each summing its tiles'
  // gradients into a buffer of its own; the buffers are then added in chunk order. Which thread
  // ran which chunk does not matter, so the result is the same on every run (no race, no
  // scheduling noise).
  const Index weight_count = d.out_c * d.col_rows;
  const Index tile_size = tile_images(d);
  const Index tiles = (d.n + tile_size - 1) / tile_size;
  const Index columns = tile_size * d.plane;
  const Index chunks = std::clamp<Index>(plan_concurrency(), 1, tiles);
  const Scratch partial_block(*pool_, chunks * weight_count);
  float* partial = partial_block.data();
  isolated_parallel_for(
      tbb::blocked_range<Index>(0, chunks, 1),
      [&](const tbb::blocked_range<Index>& r) {
        const Scratch col_block(*pool_, d.col_rows * columns), grad_block(*pool_, d.out_per_group * columns);
        float* col = col_block.data();
        float* grads = grad_block.data();
        for (Index chunk = r.begin(); chunk != r.end(); ++chunk) {
          float* sum = partial + chunk * weight_count;
          std::fill(sum, sum + weight_count, 0.0f);
          for (Index tile = tiles * chunk / chunks; tile < tiles * (chunk + 1) / chunks; ++tile) {
            const Tile t = tile_at(d, tile_size, tile);
            for (Index group = 0; group < d.groups; ++group) {
              const Matrix cols = tile_columns(d, x_data, group, t, col);
              Matrix grad{dy_data + (t.first * d.out_c + group * d.out_per_group) * d.plane, d.plane};
              if (t.count > 1) {
                gather_planes(d, dy_data, d.out_c, group * d.out_per_group, d.out_per_group, t, grads);
                grad = {grads, cols.ld};
              }
              gemm(false, true, d.out_per_group, d.col_rows, cols.ld, grad, cols, 1.0f,
                   sum + group * d.out_per_group * d.col_rows, d.col_rows);
            }
          }
        }
      },
      tbb::simple_partitioner());
  isolated_parallel_for(tbb::blocked_range<Index>(0, weight_count, 4096), [&](const tbb::blocked_range<Index>& r) {
    for (Index i = r.begin(); i != r.end(); ++i) {
      float total = 0;
      for (Index chunk = 0; chunk < chunks; ++chunk) total += partial[chunk * weight_count + i];
      dw_data[i] += total;
    }
  });
}

}  // namespace stoke::nn
