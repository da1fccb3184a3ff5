#include "cpu_backend.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../pool_bins.hpp"
#include "stoke/nn/blas.hpp"

namespace stoke::nn {

struct HostPool::State {
  std::mutex mutex;
  bool open = true;
  std::size_t cached = 0;
  std::map<std::size_t, std::vector<void*>> free;  // by bin size
};

HostPool::HostPool() : state_(std::make_shared<State>()) {}

HostPool::~HostPool() {
  const std::lock_guard lock(state_->mutex);
  state_->open = false;
  for (auto& [size, blocks] : state_->free) {
    for (void* block : blocks) std::free(block);
  }
  state_->free.clear();
  state_->cached = 0;
}

std::size_t HostPool::bin_size(std::size_t bytes) noexcept { return pool_bin_size(bytes); }

std::size_t HostPool::cached_bytes() const {
  const std::lock_guard lock(state_->mutex);
  return state_->cached;
}

std::shared_ptr<void> HostPool::allocate(std::size_t bytes) {
  const std::size_t size = bin_size(bytes);
  void* block = nullptr;
  {
    const std::lock_guard lock(state_->mutex);
    auto bin = state_->free.find(size);
    if (bin != state_->free.end() && !bin->second.empty()) {
      block = bin->second.back();
      bin->second.pop_back();
      state_->cached -= size;
    }
  }
  if (block == nullptr) {
    block = std::aligned_alloc(64, size);  // size is a multiple of 512, as aligned_alloc wants
    if (block == nullptr) throw std::bad_alloc();
  }
  // The deleter returns the block; it holds the state, so a tensor may outlive the pool.
  return {block, [state = state_, size](void* returned) {
            try {
              const std::lock_guard lock(state->mutex);
              if (state->open && state->cached + size <= kMaxCachedBytes) {
                state->free[size].push_back(returned);
                state->cached += size;
                return;
              }
            } catch (...) {
              // No memory to grow the bin: free the block instead of caching it.
            }
            std::free(returned);
          }};
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

}  // namespace stoke::nn
