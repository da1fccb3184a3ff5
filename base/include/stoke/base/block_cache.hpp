// BlockCache: freed memory blocks kept for the next request of their size class, within a byte
// limit -- the one host-memory cache of every layer (nn's CPU tensors, nodes' per-image matrices).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace stoke::base {

/// Fresh memory of a few hundred KiB or more comes from mmap, or from a heap that glibc trims
/// again soon after it is freed, and touching it costs a page fault (and the kernel's zeroing) per
/// 4 KiB. Work that allocates blocks of the same sizes over and over -- a training step's
/// activations, a pipeline's per-image matrices -- therefore keeps freed blocks and hands them out
/// again. Requests are rounded up to size classes (bin_size()); a returned block is kept within
/// `max_cached_bytes`, so the memory held beyond what is in use is bounded: when it would not fit,
/// the kept blocks of the classes least recently given or taken are freed to make room (sizes a
/// workload no longer uses -- another image size, another batch shape -- give way to the ones it
/// uses now), and the returned block itself is freed only when that is not enough. Blocks are
/// 64-byte aligned. Thread-safe (one mutex, taken once per call).
class BlockCache {
 public:
  explicit BlockCache(std::size_t max_cached_bytes);
  /// Frees the kept blocks; blocks still out must not be given back afterwards.
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  /// The size class of `bytes`: multiples of 512 below 1 MiB; above, a quarter of the largest
  /// power of two not above `bytes` (at most 25% waste, 4 classes per octave).
  static std::size_t bin_size(std::size_t bytes) noexcept;

  /// A block of bin_size(bytes) bytes: a kept one of that class, else a new one. Throws
  /// std::bad_alloc.
  void* take(std::size_t bytes);
  /// Returns a block take(bytes) gave (the same `bytes`): kept, after freeing blocks of the least
  /// recently used other classes if the limit needs it; freed when no room can be made.
  void give(void* block, std::size_t bytes) noexcept;
  /// Frees every kept block (the cache fills again with use).
  void trim() noexcept;

  /// Bytes kept for reuse now.
  std::size_t cached_bytes() const;
  /// Requests served from the kept blocks so far.
  std::size_t reused() const;
  std::size_t max_cached_bytes() const noexcept { return max_cached_; }

 private:
  const std::size_t max_cached_;
  mutable std::mutex mutex_;
  struct Bin {
    std::vector<void*> blocks;
    std::size_t used = 0;  // when a block of this class was last given or taken (clock_)
  };
  // Frees blocks of the least recently used classes other than `keep` until `bytes` more fit (or
  // none is left); with mutex_ held.
  bool make_room(std::size_t bytes, std::size_t keep) noexcept;

  std::map<std::size_t, Bin> free_;  // by size class
  std::size_t cached_ = 0;
  std::size_t reused_ = 0;
  std::size_t clock_ = 0;
};

}  // namespace stoke::base
