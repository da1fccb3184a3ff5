// CpuBackend's Linear kernels: three sgemm calls (y = x w^T, dx = dy w, dw += dy^T x), each split
// into row blocks that oneTBB runs in parallel (OpenBLAS itself is single-threaded here).
#include <cblas.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_backend.hpp"

namespace stoke::nn {
namespace {

// Rows of an output with `flops_per_row` work each, per task: enough that a task outweighs
// oneTBB's scheduling (tens of microseconds), so tiny layers run as one sgemm.
std::int64_t row_grain(std::int64_t flops_per_row) {
  constexpr std::int64_t task_flops = 1 << 18;
  return std::max<std::int64_t>(1, task_flops / std::max<std::int64_t>(1, flops_per_row));
}

int as_int(std::int64_t v) { return static_cast<int>(v); }

void require_matrix(const Tensor& x) {
  if (x.rank() != 2) {
    throw std::invalid_argument("CpuBackend linear: x is " + to_string(x.shape()) + ", expected {N, in_features}");
  }
}

}  // namespace

void CpuBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  require_cpu_f32(x, "linear_forward's x");
  require_cpu_f32(w, "linear_forward's w");
  require_cpu_f32(y, "linear_forward's y");
  require_matrix(x);
  const std::int64_t n = x.dim(0);
  const std::int64_t in = x.dim(1);
  const std::int64_t out = w.dim(0);
  require_cpu_shape(w, {out, in}, "linear's w");
  require_cpu_shape(y, {n, out}, "linear's y");
  const float* bias = nullptr;
  if (b.defined()) {
    require_cpu_f32(b, "linear_forward's b");
    require_cpu_shape(b, {out}, "linear's b");
    bias = b.data_as<const float>();
  }
  const float* xp = x.data_as<const float>();
  const float* wp = w.data_as<const float>();
  float* yp = y.data_as<float>();

  isolated_parallel_for(tbb::blocked_range<std::int64_t>(0, n, row_grain(2 * in * out)),
                        [&](const tbb::blocked_range<std::int64_t>& rows) {
                          const std::int64_t begin = rows.begin();
                          const std::int64_t count = static_cast<std::int64_t>(rows.size());
                          float* y_rows = yp + begin * out;
                          // The bias goes in first and sgemm adds x w^T onto it (beta = 1).
                          if (bias != nullptr) {
                            for (std::int64_t i = 0; i < count; ++i) std::copy(bias, bias + out, y_rows + i * out);
                          }
                          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, as_int(count), as_int(out), as_int(in),
                                      1.0f, xp + begin * in, as_int(in), wp, as_int(in), bias != nullptr ? 1.0f : 0.0f,
                                      y_rows, as_int(out));
                        });
}

void CpuBackend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx, const Tensor& dw,
                                 const Tensor& db) {
  require_cpu_f32(x, "linear_backward's x");
  require_cpu_f32(w, "linear_backward's w");
  require_cpu_f32(dy, "linear_backward's dy");
  require_matrix(x);
  const std::int64_t n = x.dim(0);
  const std::int64_t in = x.dim(1);
  const std::int64_t out = w.dim(0);
  require_cpu_shape(w, {out, in}, "linear's w");
  require_cpu_shape(dy, {n, out}, "linear's dy");
  const float* xp = x.data_as<const float>();
  const float* wp = w.data_as<const float>();
  const float* dyp = dy.data_as<const float>();

  if (dx.defined()) {
    require_cpu_f32(dx, "linear_backward's dx");
    require_cpu_shape(dx, {n, in}, "linear's dx");
    float* dxp = dx.data_as<float>();
    // dx {N, in} = dy {N, out} w {out, in}, by blocks of rows of dx.
    isolated_parallel_for(tbb::blocked_range<std::int64_t>(0, n, row_grain(2 * in * out)),
                          [&](const tbb::blocked_range<std::int64_t>& rows) {
                            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, as_int(rows.size()), as_int(in),
                                        as_int(out), 1.0f, dyp + rows.begin() * out, as_int(out), wp, as_int(in), 0.0f,
                                        dxp + rows.begin() * in, as_int(in));
                          });
  }
  if (dw.defined()) {
    require_cpu_f32(dw, "linear_backward's dw");
    require_cpu_shape(dw, {out, in}, "linear's dw");
    float* dwp = dw.data_as<float>();
    // dw {out, in} += dy^T {out, N} x {N, in}, by blocks of rows of dw (columns of dy).
    isolated_parallel_for(tbb::blocked_range<std::int64_t>(0, out, row_grain(2 * in * n)),
                          [&](const tbb::blocked_range<std::int64_t>& rows) {
                            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, as_int(rows.size()), as_int(in),
                                        as_int(n), 1.0f, dyp + rows.begin(), as_int(out), xp, as_int(in), 1.0f,
                                        dwp + rows.begin() * in, as_int(in));
                          });
  }
  if (db.defined()) {
    require_cpu_f32(db, "linear_backward's db");
    require_cpu_shape(db, {out}, "linear's db");
    // db += the column sums of dy, accumulated in double so a large batch loses nothing.
    std::vector<double> sums(static_cast<std::size_t>(out), 0.0);
    for (std::int64_t i = 0; i < n; ++i) {
      const float* row = dyp + i * out;
      for (std::int64_t o = 0; o < out; ++o) sums[static_cast<std::size_t>(o)] += static_cast<double>(row[o]);
    }
    float* dbp = db.data_as<float>();
    for (std::int64_t o = 0; o < out; ++o) dbp[o] += static_cast<float>(sums[static_cast<std::size_t>(o)]);
  }
}

}  // namespace stoke::nn
