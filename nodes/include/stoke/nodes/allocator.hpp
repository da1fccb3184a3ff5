// Allocator: where batch memory comes from. The host allocator is the default; the GPU layer
// provides one that returns pinned (page-locked) memory, so that host-to-device copies can be
// asynchronous, without BatchPool or Collate knowing the difference.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <string_view>

namespace stoke::nodes {

/// Thrown when an allocator cannot provide the memory asked for. Its message names the allocator
/// and the size; it is a std::bad_alloc so that generic out-of-memory handlers still catch it.
class AllocationError : public std::bad_alloc {
 public:
  explicit AllocationError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

/// A source of large, aligned, long-lived blocks (batch slots). Implementations must be
/// thread-safe: a pool allocates on the thread that builds it and frees on whichever thread drops
/// the last reference to it.
class Allocator {
 public:
  virtual ~Allocator() = default;

  /// `bytes` (> 0) aligned to `alignment` (a power of two). Never returns null: throws
  /// AllocationError naming the allocator when the memory is not available, and
  /// std::invalid_argument for a zero size or a bad alignment.
  void* allocate(std::size_t bytes, std::size_t alignment);
  /// Frees a block from allocate() with the same `bytes` and `alignment`. Null is ignored.
  void deallocate(void* block, std::size_t bytes, std::size_t alignment) noexcept;

  /// A short name for messages and stats, e.g. "host" or "cuda-pinned".
  virtual std::string_view name() const noexcept = 0;

 protected:
  /// May return null or throw when out of memory; arguments are already validated.
  virtual void* allocate_impl(std::size_t bytes, std::size_t alignment) = 0;
  virtual void deallocate_impl(void* block, std::size_t bytes, std::size_t alignment) noexcept = 0;
};

using AllocatorPtr = std::shared_ptr<Allocator>;

/// Ordinary host memory from aligned operator new. Stateless and thread-safe.
class HostAllocator final : public Allocator {
 public:
  std::string_view name() const noexcept override { return "host"; }

 protected:
  void* allocate_impl(std::size_t bytes, std::size_t alignment) override;
  void deallocate_impl(void* block, std::size_t bytes, std::size_t alignment) noexcept override;
};

/// The process-wide HostAllocator (what BatchPool uses when given none).
AllocatorPtr host_allocator();

}  // namespace stoke::nodes
