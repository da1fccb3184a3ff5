// RecyclingAllocator: a cv::MatAllocator that keeps freed blocks for the next matrix of the same
// size, within a byte limit -- for the large per-image matrices every item makes and frees again.
#pragma once

#include <opencv2/core/mat.hpp>

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace stoke::nodes {

/// Under glibc's defaults a block above its mmap threshold (128 KiB to start) is mapped when
/// allocated and the heap it came from is trimmed again soon after it is freed, so a matrix of a
/// few hundred KiB made per image is faulted in, page by page and zeroed by the kernel, for every
/// image: at 224 px, Normalize's float planes (602 KB) cost stoke's loading 20% more CPU than
/// with memory kept (docs/benchmarks.md). This allocator keeps each freed block of at least
/// `min_block_bytes` while its cache holds at most `max_cached_bytes`, and hands it to the next
/// request of exactly that size; smaller blocks, and those the cache has no room for, go to
/// OpenCV's own allocation. Thread-safe (one mutex, taken once per block).
///
/// Set it on a matrix before create(): `cv::Mat m; m.allocator = &image_allocator(); m.create(...)`.
/// A matrix made by it calls it back when its last reference goes, so the allocator must outlive
/// every such matrix: image_allocator() is never destroyed.
class RecyclingAllocator final : public cv::MatAllocator {
 public:
  RecyclingAllocator(std::size_t max_cached_bytes, std::size_t min_block_bytes);
  ~RecyclingAllocator() override;
  RecyclingAllocator(const RecyclingAllocator&) = delete;
  RecyclingAllocator& operator=(const RecyclingAllocator&) = delete;

  cv::UMatData* allocate(int dims, const int* sizes, int type, void* data, size_t* step, cv::AccessFlag flags,
                         cv::UMatUsageFlags usage) const override;
  bool allocate(cv::UMatData* data, cv::AccessFlag flags, cv::UMatUsageFlags usage) const override;
  void deallocate(cv::UMatData* data) const override;

  /// Bytes of freed blocks kept for reuse now.
  std::size_t cached_bytes() const;
  std::size_t max_cached_bytes() const noexcept { return max_cached_; }
  /// Requests served from the cache so far.
  std::size_t reused() const;
  /// Frees every kept block (the memory of a finished run, say); the cache fills again with use.
  void trim() const;

 private:
  void* take(std::size_t bytes) const;

  std::size_t max_cached_;
  std::size_t min_block_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::size_t, std::vector<void*>> free_;  // by exact size
  mutable std::size_t cached_ = 0;
  mutable std::size_t reused_ = 0;
};

/// The allocator of the per-image matrices stoke's transforms make (Normalize's planes): blocks
/// of 128 KiB and more, at most 64 MiB kept. One per process, never destroyed.
RecyclingAllocator& image_allocator();

}  // namespace stoke::nodes
