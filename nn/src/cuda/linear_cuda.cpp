// CudaBackend's Linear, by cuBLAS's GEMM with f32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F,
// for f32, bf16 and f16 alike). cuBLAS is column-major; a row-major {rows, cols} matrix is the
// column-major {cols, rows} matrix, its transpose, with leading dimension cols. So, with
// x {N, in}, w {out, in}, y {N, out} all row-major:
//   y = x w^T      is  y^T (out x N)  = w^T^T x^T:  A = w  (op T, lda in),  B = x  (op N, ldb in)
//   dx = dy w      is  dx^T (in x N)  = w^T dy^T:   A = w  (op N, lda in),  B = dy (op N, ldb out)
//   dw += dy^T x   is  dw^T (in x out) = x^T dy:    A = x  (op N, lda in),  B = dy (op T, ldb out)
// The bias is added and its gradient summed by the per-channel kernels of bias_kernels.cu, a
// Linear's output being an image of {N, out, 1, 1}.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"
#include "kernels.hpp"
#include "stoke/nn/device.hpp"

namespace stoke::nn::cuda {
namespace {

cudaDataType_t cublas_type(DType dtype) {
  switch (dtype) {
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

int as_int(std::int64_t v, const char* kernel) {
  if (v > std::numeric_limits<int>::max()) {
    throw std::invalid_argument(std::string("CudaBackend::") + kernel + ": a dimension of " + std::to_string(v) +
                                " is past cuBLAS's 32-bit limit");
  }
  return static_cast<int>(v);
}

// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C, all of `dtype`, accumulated in f32.
void gemm(cublasContext* handle, DType dtype, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
          const void* a, int lda, const void* b, int ldb, float beta, void* c, int ldc) {
  if (m == 0 || n == 0) return;
  // cuBLAS wants leading dimensions of at least 1, even for empty matrices.
  lda = std::max(lda, 1);
  ldb = std::max(ldb, 1);
  ldc = std::max(ldc, 1);
  const float alpha = 1.0f;
  const cudaDataType_t type = cublas_type(dtype);
  STOKE_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, m, n, k, &alpha, a, type, lda, b, type, ldb, &beta, c, type, ldc,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  constexpr const char* kernel = "linear_forward";
  require_float(x, device_, kernel, "x");
  require_float(w, device_, kernel, "w", &x);
  require_float(y, device_, kernel, "y", &x);
  if (x.rank() != 2)
    throw std::invalid_argument("CudaBackend::linear_forward: x is " + x.describe() + "; expected {N, in}");
  const std::int64_t n = x.dim(0), in = x.dim(1), out = w.rank() == 2 ? w.dim(0) : -1;
  require_shape(w, {out, in}, kernel, "w");
  require_shape(y, {n, out}, kernel, "y");
  if (b.defined()) {
    require_float(b, device_, kernel, "b", &x);
    require_count(b, out, kernel, "b");
  }
  const DeviceGuard guard(device_);
  gemm(cublas_.native(), x.dtype(), CUBLAS_OP_T, CUBLAS_OP_N, as_int(out, kernel), as_int(n, kernel),
       as_int(in, kernel), w.data(), as_int(in, kernel), x.data(), as_int(in, kernel), 0.0f, y.data(),
       as_int(out, kernel));
  if (in == 0 && n * out > 0) {
    // k = 0: cuBLAS's GEMM may leave C untouched; y = 0 (+ b) is the right answer.
    STOKE_CUDA_CHECK(cudaMemsetAsync(y.data(), 0, y.bytes(), stream_.native()));
  }
  if (b.defined()) add_channel_bias(y.dtype(), y.data(), b.data(), ImageDims{n, out, 1, 1, true}, stream_.native());
}

void CudaBackend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dx,
                                  const Tensor& dw, const Tensor& db) {
  constexpr const char* kernel = "linear_backward";
  require_float(x, device_, kernel, "x");
  require_float(w, device_, kernel, "w", &x);
  require_float(dy, device_, kernel, "dy", &x);
  if (x.rank() != 2)
    throw std::invalid_argument("CudaBackend::linear_backward: x is " + x.describe() + "; expected {N, in}");
  const std::int64_t n = x.dim(0), in = x.dim(1), out = w.rank() == 2 ? w.dim(0) : -1;
  require_shape(w, {out, in}, kernel, "w");
  require_shape(dy, {n, out}, kernel, "dy");
  if (dx.defined()) {
    require_float(dx, device_, kernel, "dx", &x);
    require_shape(dx, {n, in}, kernel, "dx");
  }
  if (dw.defined()) {
    require_float(dw, device_, kernel, "dw", &x);
    require_shape(dw, {out, in}, kernel, "dw");
  }
  if (db.defined()) {
    require_float(db, device_, kernel, "db", &x);
    require_count(db, out, kernel, "db");
  }
  const DeviceGuard guard(device_);
  const int n_ = as_int(n, kernel), in_ = as_int(in, kernel), out_ = as_int(out, kernel);
  if (dx.defined()) {
    gemm(cublas_.native(), x.dtype(), CUBLAS_OP_N, CUBLAS_OP_N, in_, n_, out_, w.data(), in_, dy.data(), out_, 0.0f,
         dx.data(), in_);
    if (out == 0 && n * in > 0) STOKE_CUDA_CHECK(cudaMemsetAsync(dx.data(), 0, dx.bytes(), stream_.native()));
  }
  // beta = 1: dw += dy^T x (k = N = 0 adds nothing, which cuBLAS leaves as it is).
  if (dw.defined()) {
    gemm(cublas_.native(), x.dtype(), CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, n_, x.data(), in_, dy.data(), out_, 1.0f,
         dw.data(), in_);
  }
  if (db.defined()) {
    accumulate_channel_sums(dy.dtype(), dy.data(), db.data(), ImageDims{n, out, 1, 1, true}, stream_.native());
  }
}

}  // namespace stoke::nn::cuda
