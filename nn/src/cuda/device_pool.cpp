#include "device_pool.hpp"

#include <utility>

#include "stoke/base/block_cache.hpp"
#include "stoke/nn/device.hpp"

namespace stoke::nn::cuda {

DevicePool::DevicePool(Device device) : state_(std::make_shared<State>()) { state_->device = device; }

DevicePool::~DevicePool() {
  std::map<std::size_t, std::vector<DeviceBuffer>> cached;
  {
    const std::lock_guard lock(state_->mutex);
    state_->open = false;
    cached.swap(state_->free);
    state_->stats.cached_bytes = 0;
  }
  // `cached` frees its blocks here, outside the lock (cudaFree waits for the device).
}

std::size_t DevicePool::bin_size(std::size_t bytes) noexcept { return base::BlockCache::bin_size(bytes); }

std::shared_ptr<void> DevicePool::allocate(std::size_t bytes) {
  const std::size_t size = bin_size(bytes);
  DeviceBuffer block;
  {
    const std::lock_guard lock(state_->mutex);
    auto bin = state_->free.find(size);
    if (bin != state_->free.end() && !bin->second.empty()) {
      block = std::move(bin->second.back());
      bin->second.pop_back();
      state_->stats.cached_bytes -= size;
    }
  }
  if (block.empty()) {
    try {
      block = DeviceBuffer(state_->device, size);
    } catch (const CudaOutOfMemory&) {
      release_cached();
      block = DeviceBuffer(state_->device, size);
    }
    const std::lock_guard lock(state_->mutex);
    ++state_->stats.driver_allocations;
  }
  {
    const std::lock_guard lock(state_->mutex);
    state_->stats.in_use_bytes += size;
  }
  // The deleter owns the block while the tensor lives; make_shared would not let us take it back.
  auto holder = std::make_unique<DeviceBuffer>(std::move(block));
  void* data = holder->data();
  std::shared_ptr<State> state = state_;
  return {data, [state = std::move(state), holder = std::shared_ptr<DeviceBuffer>(std::move(holder))](void*) {
            give_back(state, std::move(*holder));
          }};
}

void DevicePool::give_back(const std::shared_ptr<State>& state, DeviceBuffer block) noexcept {
  const std::size_t size = block.size();
  try {
    const std::lock_guard lock(state->mutex);
    state->stats.in_use_bytes -= size;
    if (!state->open) return;  // `block` is freed on leaving, after the lock
    state->free[size].push_back(std::move(block));
    state->stats.cached_bytes += size;
  } catch (...) {
    // A failed push_back (no host memory): the block is freed instead of cached.
  }
}

void DevicePool::release_cached() {
  std::map<std::size_t, std::vector<DeviceBuffer>> cached;
  {
    const std::lock_guard lock(state_->mutex);
    cached.swap(state_->free);
    state_->stats.cached_bytes = 0;
  }
}

DevicePool::Stats DevicePool::stats() const {
  const std::lock_guard lock(state_->mutex);
  return state_->stats;
}

}  // namespace stoke::nn::cuda
