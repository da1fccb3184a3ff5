#include "stoke/nodes/recycling_allocator.hpp"

#include <opencv2/core/utility.hpp>

namespace stoke::nodes {

namespace {

// A step to compute (CV_AUTOSTEP of OpenCV's C API), where the caller gives its own data.
constexpr std::size_t kAutoStep = 0x7fffffff;

}  // namespace

RecyclingAllocator::RecyclingAllocator(std::size_t max_cached_bytes, std::size_t min_block_bytes)
    : max_cached_(max_cached_bytes), min_block_(min_block_bytes) {}

RecyclingAllocator::~RecyclingAllocator() { trim(); }

void RecyclingAllocator::trim() const {
  std::unordered_map<std::size_t, std::vector<void*>> blocks;
  {
    const std::lock_guard lock(mutex_);
    blocks.swap(free_);
    cached_ = 0;
  }
  for (auto& [bytes, list] : blocks)
    for (void* block : list) cv::fastFree(block);
}

void* RecyclingAllocator::take(std::size_t bytes) const {
  if (bytes < min_block_) return nullptr;
  const std::lock_guard lock(mutex_);
  const auto bin = free_.find(bytes);
  if (bin == free_.end() || bin->second.empty()) return nullptr;
  void* block = bin->second.back();
  bin->second.pop_back();
  cached_ -= bytes;
  ++reused_;
  return block;
}

// As OpenCV's own allocator lays a matrix out (rows of the element size times the columns, and
// so on outwards), with the data from the cache when it holds a block of that size.
cv::UMatData* RecyclingAllocator::allocate(int dims, const int* sizes, int type, void* data, size_t* step,
                                           cv::AccessFlag /*flags*/, cv::UMatUsageFlags /*usage*/) const {
  std::size_t total = CV_ELEM_SIZE(type);
  for (int i = dims - 1; i >= 0; --i) {
    if (step != nullptr) {
      if (data != nullptr && step[i] != kAutoStep) {
        CV_Assert(total <= step[i]);
        total = step[i];
      } else {
        step[i] = total;
      }
    }
    total *= static_cast<std::size_t>(sizes[i]);
  }
  void* block = data;
  if (block == nullptr) block = take(total);
  if (block == nullptr) block = cv::fastMalloc(total);
  auto* u = new cv::UMatData(this);
  u->data = u->origdata = static_cast<uchar*>(block);
  u->size = total;
  if (data != nullptr) u->flags |= cv::UMatData::USER_ALLOCATED;
  return u;
}

bool RecyclingAllocator::allocate(cv::UMatData* data, cv::AccessFlag /*flags*/, cv::UMatUsageFlags /*usage*/) const {
  return data != nullptr;
}

void RecyclingAllocator::deallocate(cv::UMatData* u) const {
  if (u == nullptr) return;
  CV_Assert(u->urefcount == 0 && u->refcount == 0);
  if (!(u->flags & cv::UMatData::USER_ALLOCATED)) {
    void* block = u->origdata;
    bool kept = false;
    if (u->size >= min_block_) {
      const std::lock_guard lock(mutex_);
      if (cached_ + u->size <= max_cached_) {
        free_[u->size].push_back(block);
        cached_ += u->size;
        kept = true;
      }
    }
    if (!kept) cv::fastFree(block);
    u->origdata = nullptr;
  }
  delete u;
}

std::size_t RecyclingAllocator::cached_bytes() const {
  const std::lock_guard lock(mutex_);
  return cached_;
}

std::size_t RecyclingAllocator::reused() const {
  const std::lock_guard lock(mutex_);
  return reused_;
}

RecyclingAllocator& image_allocator() {
  // Never destroyed: a matrix it made may be released during static destruction.
  static auto* allocator = new RecyclingAllocator(std::size_t{64} << 20, std::size_t{128} << 10);
  return *allocator;
}

}  // namespace stoke::nodes
