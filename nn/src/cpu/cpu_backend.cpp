#include "cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "stoke/nn/blas.hpp"

namespace stoke::nn {

HostPool::HostPool() : cache_(std::make_shared<base::BlockCache>(kMaxCachedBytes)) {}

// Blocks still out keep the cache alive (their deleters hold it); it goes with the last of them.
HostPool::~HostPool() { cache_->trim(); }

std::size_t HostPool::bin_size(std::size_t bytes) noexcept { return base::BlockCache::bin_size(bytes); }

std::size_t HostPool::cached_bytes() const { return cache_->cached_bytes(); }

std::shared_ptr<void> HostPool::allocate(std::size_t bytes) {
  return {cache_->take(bytes), [cache = cache_, bytes](void* block) { cache->give(block, bytes); }};
}

CpuBackend::CpuBackend() : pool_(std::make_shared<HostPool>()) {
  // oneTBB threads the kernels; OpenBLAS inside them must not start threads of its own.
  openblas_set_num_threads(1);
}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::describe() const {
  return "cpu (im2col + OpenBLAS " + blas_kernels() + " kernels, threaded with oneTBB)";
}

Tensor CpuBackend::empty(Shape shape, DType dtype, TensorLayout layout) {
  const std::int64_t count = element_count(shape);
  // Small tensors come from malloc's own free lists, with no page faults to save; a bad shape goes
  // to Tensor's constructor, which names it.
  const bool bad_shape = std::any_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 0; });
  if (bad_shape || static_cast<std::size_t>(count) * element_size(dtype) < HostPool::kMinBytes) {
    return Tensor(std::move(shape), dtype, Device::cpu(), layout);
  }
  const std::size_t bytes = static_cast<std::size_t>(count) * element_size(dtype);
  return Tensor::from_owner(pool_->allocate(bytes), std::move(shape), dtype, Device::cpu(), layout);
}

void require_cpu_f32(const Tensor& t, const char* what) {
  if (!t.device().is_cpu() || t.dtype() != DType::f32 || (t.rank() == 4 && t.layout() != TensorLayout::nchw)) {
    throw std::invalid_argument(std::string("CpuBackend: ") + what + " is " + t.describe() +
                                "; the CPU kernels take f32 NCHW tensors on the CPU");
  }
}

void require_cpu_shape(const Tensor& t, const Shape& expected, const std::string& what) {
  if (t.shape() != expected) {
    throw std::invalid_argument("CpuBackend: " + what + " is " + t.describe() + "; expected " + to_string(expected));
  }
}

}  // namespace stoke::nn
