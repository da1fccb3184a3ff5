#include "cpu_backend.hpp"

#include "stoke/gpu/nn/blas.hpp"

#include <cblas.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace stoke::gpu::nn {

CpuBackend::CpuBackend() {
  // oneTBB threads the kernels; OpenBLAS inside them must not start threads of its own.
  openblas_set_num_threads(1);
}

std::string CpuBackend::describe() const {
  return "cpu (im2col + OpenBLAS " + blas_kernels() + " kernels, threaded with oneTBB)";
}

Tensor CpuBackend::empty(Shape shape, DType dtype, TensorLayout layout) {
  return Tensor(std::move(shape), dtype, Device::cpu(), layout);
}

void require_cpu_f32(const Tensor& t, const char* what) {
  if (!t.device().is_cpu() || t.dtype() != DType::f32 || (t.rank() == 4 && t.layout() != TensorLayout::nchw)) {
    throw std::invalid_argument(std::string("CpuBackend: ") + what + " is " + t.describe() +
                                "; the CPU kernels take f32 NCHW tensors on the CPU");
  }
}

}  // namespace stoke::gpu::nn
