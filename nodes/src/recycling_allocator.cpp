#include "stoke/nodes/recycling_allocator.hpp"

#include <algorithm>
#include <bit>

namespace stoke::nodes {

namespace {

// The block a matrix of `bytes` asks the cache for: rounded up to one of eight sizes per power of
// two, so that matrices of nearby sizes share blocks (a decoded crop's size changes from image to
// image) at the cost of at most an eighth more memory per block. Coarser than the cache's own
// classes below 1 MiB (multiples of 512, right for nn's fixed-size activations); above 1 MiB the
// cache's quarter-octave classes round it further.
std::size_t block_size(std::size_t bytes) noexcept {
  const std::size_t step = std::max<std::size_t>(std::bit_floor(bytes) / 8, 1);
  return (bytes + step - 1) / step * step;
}

}  // namespace

RecyclingAllocator::RecyclingAllocator(std::size_t max_cached_bytes, std::size_t min_block_bytes)
    : min_block_(min_block_bytes), cache_(max_cached_bytes) {}

// Laid out as OpenCV's own allocator lays a fresh matrix out: each dimension's step is the
// element size times the sizes inside it.
cv::UMatData* RecyclingAllocator::allocate(int dims, const int* sizes, int type, void* data, size_t* step,
                                           cv::AccessFlag flags, cv::UMatUsageFlags usage) const {
  std::size_t total = CV_ELEM_SIZE(type);
  for (int i = 0; i < dims; ++i) total *= static_cast<std::size_t>(sizes[i]);
  if (data != nullptr || total < min_block_)
    return cv::Mat::getStdAllocator()->allocate(dims, sizes, type, data, step, flags, usage);
  if (step != nullptr) {
    std::size_t inner = CV_ELEM_SIZE(type);
    for (int i = dims - 1; i >= 0; --i) {
      step[i] = inner;
      inner *= static_cast<std::size_t>(sizes[i]);
    }
  }
  auto* u = new cv::UMatData(this);
  u->data = u->origdata = static_cast<uchar*>(cache_.take(block_size(total)));
  u->size = total;  // what OpenCV knows of; deallocate() gives back block_size(size)
  return u;
}

bool RecyclingAllocator::allocate(cv::UMatData* data, cv::AccessFlag /*flags*/, cv::UMatUsageFlags /*usage*/) const {
  return data != nullptr;
}

void RecyclingAllocator::deallocate(cv::UMatData* u) const {
  if (u == nullptr) return;
  CV_Assert(u->urefcount == 0 && u->refcount == 0);
  cache_.give(u->origdata, block_size(u->size));
  delete u;
}

RecyclingAllocator& image_allocator() {
  // Never destroyed: a matrix it made may be released during static destruction.
  static auto* allocator = new RecyclingAllocator(std::size_t{64} << 20, std::size_t{128} << 10);
  return *allocator;
}

cv::Mat recycled_mat() {
  cv::Mat m;
  m.allocator = &image_allocator();
  return m;
}

}  // namespace stoke::nodes
