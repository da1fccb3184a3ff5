#include "stoke/nodes/allocator.hpp"

#include <bit>
#include <stdexcept>

namespace stoke::nodes {

void* Allocator::allocate(std::size_t bytes, std::size_t alignment) {
  if (bytes == 0) throw std::invalid_argument("allocator '" + std::string(name()) + "': cannot allocate 0 bytes");
  if (!std::has_single_bit(alignment))
    throw std::invalid_argument("allocator '" + std::string(name()) + "': alignment " + std::to_string(alignment) +
                                " is not a power of two");
  void* block = nullptr;
  try {
    block = allocate_impl(bytes, alignment);
  } catch (const AllocationError&) {
    throw;
  } catch (const std::bad_alloc&) {
    block = nullptr;
  }
  if (block == nullptr)
    throw AllocationError("allocator '" + std::string(name()) + "': out of memory allocating " + std::to_string(bytes) +
                          " bytes (reduce the batch size or the number of pool slots)");
  return block;
}

void Allocator::deallocate(void* block, std::size_t bytes, std::size_t alignment) noexcept {
  if (block != nullptr) deallocate_impl(block, bytes, alignment);
}

void* HostAllocator::allocate_impl(std::size_t bytes, std::size_t alignment) {
  return ::operator new (bytes, std::align_val_t{alignment}, std::nothrow);
}

void HostAllocator::deallocate_impl(void* block, std::size_t bytes, std::size_t alignment) noexcept {
  ::operator delete (block, bytes, std::align_val_t{alignment});
}

AllocatorPtr host_allocator() {
  static const AllocatorPtr instance = std::make_shared<HostAllocator>();
  return instance;
}

}  // namespace stoke::nodes
