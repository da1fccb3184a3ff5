#include "stoke/gpu/staging.hpp"

#include <algorithm>
#include <mutex>
#include <utility>
#include <vector>

#include "stoke/gpu/memory.hpp"

namespace stoke::gpu {

namespace detail {

/// Pinned memory on a CUDA device, a plain vector on the CPU.
struct StagingBuffer {
  PinnedBuffer pinned;
  std::vector<std::byte> host;
  std::size_t capacity = 0;
  std::byte* data() noexcept { return host.empty() ? pinned.data() : host.data(); }
};

struct StagingState {
  Device device;
  std::mutex mutex;
  std::vector<std::unique_ptr<StagingBuffer>> free;
  std::size_t made = 0;

  void give_back(std::unique_ptr<StagingBuffer> buffer) noexcept {
    try {
      std::lock_guard lock(mutex);
      free.push_back(std::move(buffer));
    } catch (...) {  // no room in the free list: the buffer is freed instead of reused
    }
  }
};

}  // namespace detail

namespace {

// Sizes are rounded up to a power of two (at least 256 bytes), so that buffers fit many requests.
std::size_t rounded(std::size_t bytes) {
  std::size_t size = 256;
  while (size < bytes) size *= 2;
  return size;
}

}  // namespace

Staged::Staged(std::shared_ptr<detail::StagingState> pool, std::unique_ptr<detail::StagingBuffer> buffer,
               std::size_t size) noexcept
    : pool_(std::move(pool)), buffer_(std::move(buffer)), size_(size) {}

Staged::Staged() noexcept = default;

Staged::~Staged() { reset(); }

Staged::Staged(Staged&& other) noexcept
    : pool_(std::move(other.pool_)), buffer_(std::move(other.buffer_)), size_(std::exchange(other.size_, 0)) {}

Staged& Staged::operator=(Staged&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::move(other.pool_);
    buffer_ = std::move(other.buffer_);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

std::byte* Staged::data() const noexcept { return buffer_ ? buffer_->data() : nullptr; }

void Staged::reset() noexcept {
  if (buffer_ && pool_) pool_->give_back(std::move(buffer_));
  buffer_.reset();
  pool_.reset();
  size_ = 0;
}

StagingPool::StagingPool(Device device) : state_(std::make_shared<detail::StagingState>()) {
  state_->device = device;
}

Staged StagingPool::take(std::size_t bytes) {
  {
    std::lock_guard lock(state_->mutex);
    auto& free = state_->free;
    const auto fits =
        std::find_if(free.begin(), free.end(), [&](const auto& buffer) { return buffer->capacity >= bytes; });
    if (fits != free.end()) {
      std::unique_ptr<detail::StagingBuffer> buffer = std::move(*fits);
      free.erase(fits);
      return Staged(state_, std::move(buffer), bytes);
    }
    ++state_->made;
  }
  auto buffer = std::make_unique<detail::StagingBuffer>();
  buffer->capacity = rounded(bytes);
  if (state_->device.is_cuda()) {
    buffer->pinned = PinnedBuffer(buffer->capacity);
  } else {
    buffer->host.resize(buffer->capacity);
  }
  return Staged(state_, std::move(buffer), bytes);
}

Staged StagingPool::copy(const void* src, std::size_t bytes, StreamView stream) {
  Staged out = take(bytes);
  if (bytes > 0) copy_async(out.data(), src, bytes, stream);
  return out;
}

Device StagingPool::device() const noexcept { return state_->device; }

std::size_t StagingPool::buffers() const {
  std::lock_guard lock(state_->mutex);
  return state_->made;
}

}  // namespace stoke::gpu
