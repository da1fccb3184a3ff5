// RecyclingAllocator: a cv::MatAllocator whose large blocks come from a base::BlockCache -- for
// the per-image matrices every item makes and frees again.
#pragma once

#include <opencv2/core/mat.hpp>

#include <cstddef>

#include "stoke/base/block_cache.hpp"

namespace stoke::nodes {

/// Under glibc's defaults a block above its mmap threshold (128 KiB to start) is mapped when
/// allocated, or taken from a heap that is trimmed again soon after it is freed, so a matrix of a
/// few hundred KiB made per image is faulted in, page by page and zeroed by the kernel, for every
/// image: at 224 px, Normalize's float planes (602 KB) cost stoke's loading a fifth more CPU
/// (docs/benchmarks.md). This allocator serves matrices of at least `min_block_bytes` from a
/// BlockCache that keeps up to `max_cached_bytes` of freed blocks; smaller matrices, and those
/// over data the caller gives, are OpenCV's own. A block is the matrix's size rounded up to one of
/// eight sizes per power of two (below 1 MiB; above, the cache's own four per power of two), so
/// matrices of nearby sizes (a decoded crop's changes from image to image) share blocks, each at
/// most an eighth (above 1 MiB a quarter) larger than asked. Thread-safe.
///
/// Set it on a matrix before create(), as recycled_mat() does for image_allocator().
/// A matrix made by it calls it back when its last reference goes, so the allocator must outlive
/// every such matrix: image_allocator() is never destroyed.
class RecyclingAllocator final : public cv::MatAllocator {
 public:
  RecyclingAllocator(std::size_t max_cached_bytes, std::size_t min_block_bytes);

  cv::UMatData* allocate(int dims, const int* sizes, int type, void* data, size_t* step, cv::AccessFlag flags,
                         cv::UMatUsageFlags usage) const override;
  bool allocate(cv::UMatData* data, cv::AccessFlag flags, cv::UMatUsageFlags usage) const override;
  void deallocate(cv::UMatData* data) const override;

  /// The kept blocks (cached_bytes(), reused(), trim() to give the memory back).
  base::BlockCache& cache() const noexcept { return cache_; }

 private:
  std::size_t min_block_;
  mutable base::BlockCache cache_;
};

/// The allocator of the per-image matrices stoke's decoders and transforms make: blocks
/// of 128 KiB and more, at most 64 MiB kept. One per process, never destroyed.
RecyclingAllocator& image_allocator();

/// An empty matrix whose storage, when create() or an OpenCV function writing it (cv::resize,
/// cv::flip, ...) makes it, comes from image_allocator(): how the decoders and transforms make
/// each image's output.
cv::Mat recycled_mat();

}  // namespace stoke::nodes
