#include "stoke/base/block_cache.hpp"

#include <bit>
#include <cstdlib>
#include <new>
#include <utility>

namespace stoke::base {

BlockCache::BlockCache(std::size_t max_cached_bytes) : max_cached_(max_cached_bytes) {}

BlockCache::~BlockCache() { trim(); }

std::size_t BlockCache::bin_size(std::size_t bytes) noexcept {
  constexpr std::size_t small = 512;
  constexpr std::size_t mib = std::size_t{1} << 20;
  if (bytes < mib) return bytes == 0 ? small : (bytes + small - 1) / small * small;
  const std::size_t step = std::bit_floor(bytes) / 4;
  return (bytes + step - 1) / step * step;
}

void* BlockCache::take(std::size_t bytes) {
  const std::size_t size = bin_size(bytes);
  {
    const std::lock_guard lock(mutex_);
    const auto bin = free_.find(size);
    if (bin != free_.end()) {
      bin->second.used = ++clock_;
      if (!bin->second.blocks.empty()) {
        void* block = bin->second.blocks.back();
        bin->second.blocks.pop_back();
        cached_ -= size;
        ++reused_;
        return block;
      }
    }
  }
  void* block = std::aligned_alloc(64, size);  // a multiple of 512, as aligned_alloc wants
  if (block == nullptr) throw std::bad_alloc();
  return block;
}

void BlockCache::give(void* block, std::size_t bytes) noexcept {
  if (block == nullptr) return;
  const std::size_t size = bin_size(bytes);
  try {
    const std::lock_guard lock(mutex_);
    if (make_room(size, size)) {
      Bin& bin = free_[size];
      bin.blocks.push_back(block);
      bin.used = ++clock_;
      cached_ += size;
      return;
    }
  } catch (...) {
    // No memory to grow the bin: free the block instead of keeping it.
  }
  std::free(block);
}

bool BlockCache::make_room(std::size_t bytes, std::size_t keep) noexcept {
  const auto same = free_.find(keep);
  const std::size_t kept = same == free_.end() ? 0 : keep * same->second.blocks.size();
  if (kept + bytes > max_cached_) return false;  // only blocks of its own class in the way
  while (cached_ + bytes > max_cached_) {
    auto oldest = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->first != keep && !it->second.blocks.empty() &&
          (oldest == free_.end() || it->second.used < oldest->second.used)) {
        oldest = it;
      }
    }
    if (oldest == free_.end()) return false;
    std::free(oldest->second.blocks.back());
    oldest->second.blocks.pop_back();
    cached_ -= oldest->first;
    if (oldest->second.blocks.empty()) free_.erase(oldest);
  }
  return true;
}

void BlockCache::trim() noexcept {
  std::map<std::size_t, Bin> blocks;
  {
    const std::lock_guard lock(mutex_);
    blocks.swap(free_);
    cached_ = 0;
  }
  for (auto& [size, bin] : blocks)
    for (void* block : bin.blocks) std::free(block);
}

std::size_t BlockCache::cached_bytes() const {
  const std::lock_guard lock(mutex_);
  return cached_;
}

std::size_t BlockCache::reused() const {
  const std::lock_guard lock(mutex_);
  return reused_;
}

}  // namespace stoke::base
