#include "stoke/nodes/batch_pool.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

namespace stoke::nodes {

namespace detail {

/// The shared state of a pool: the slots and the free list. Lives as long as any BatchPool handle
/// or Batch refers to it.
class PoolState {
 public:
  PoolState(BatchShape shape_in, std::size_t count, AllocatorPtr allocator_in)
      : shape(shape_in), allocator(std::move(allocator_in)) {
    const BatchBlock layout = block_layout(shape, BatchPool::part_alignment);
    bytes_per_slot = layout.bytes;

    slots.resize(count);
    free.reserve(count);
    try {
      for (std::size_t i = 0; i < count; ++i) {
        BatchSlot& slot = slots[i];
        slot.id = i;
        slot.block = static_cast<std::byte*>(allocator->allocate(bytes_per_slot, BatchPool::slot_alignment));
        slot.data = slot.block + layout.pixels;
        slot.mask = slot.block + layout.mask;
        slot.labels = reinterpret_cast<std::int32_t*>(slot.block + layout.labels);
        slot.indices = reinterpret_cast<std::uint64_t*>(slot.block + layout.indices);
        for (std::size_t offset : layout.targets) slot.targets.push_back(reinterpret_cast<float*>(slot.block + offset));
        slot.boxes = reinterpret_cast<float*>(slot.block + layout.boxes);
        slot.box_classes = reinterpret_cast<std::int32_t*>(slot.block + layout.box_classes);
        slot.box_extras = reinterpret_cast<float*>(slot.block + layout.box_extras);
        slot.box_counts = reinterpret_cast<std::int32_t*>(slot.block + layout.box_counts);
        slot.item_sizes = reinterpret_cast<std::int32_t*>(slot.block + layout.item_sizes);
        slot.extent = cv::Size(shape.width, shape.height);
        slot.names.resize(shape.batch_size);
      }
    } catch (...) {
      free_blocks();
      throw;
    }
    // Handed out from the back: slot 0 first, and the most recently returned (cache-warm) next.
    for (std::size_t i = count; i-- > 0;) free.push_back(&slots[i]);
    free_count.store(free.size());
  }

  PoolState(const PoolState&) = delete;
  PoolState& operator=(const PoolState&) = delete;
  ~PoolState() { free_blocks(); }

  /// Takes a free slot; locked by the caller, free non-empty.
  BatchSlot* take_locked() {
    BatchSlot* slot = free.back();
    free.pop_back();
    free_count.store(free.size(), std::memory_order_release);
    slot->size = 0;
    slot->epoch = 0;
    slot->extent = cv::Size(shape.width, shape.height);
    ++acquired;
    peak_in_use = std::max(peak_in_use, slots.size() - free.size());
    return slot;
  }

  void throw_closed() const {
    throw PoolClosed("batch pool (" + shape.describe() + ", " + std::to_string(slots.size()) +
                     " slots) was closed: the pipeline is shutting down");
  }

  void release(BatchSlot& slot) noexcept {
    std::vector<graph::Wake> ring;
    {
      std::lock_guard lock(mutex);
      free.push_back(&slot);
      free_count.store(free.size(), std::memory_order_release);
      if (!waiting_stages.empty()) waited += std::chrono::steady_clock::now() - stages_waiting_since;
      ring.swap(waiting_stages);
    }
    available.notify_one();
    for (const graph::Wake& wake : ring) wake();
  }

  /// The waiting stages, rung at once (close() and the first slot back ring them all).
  void ring_all() noexcept {
    std::vector<graph::Wake> ring;
    {
      std::lock_guard lock(mutex);
      ring.swap(waiting_stages);
    }
    for (const graph::Wake& wake : ring) wake();
  }

  const BatchShape shape;
  const AllocatorPtr allocator;
  std::size_t bytes_per_slot = 0;
  std::vector<BatchSlot> slots;  // never resized after construction: Batches point into it

  mutable std::mutex mutex;
  std::condition_variable available;
  std::vector<BatchSlot*> free;        // guarded by mutex
  std::atomic<std::size_t> free_count{0};        // free.size(), readable without the lock
  std::vector<graph::Wake> waiting_stages;       // guarded by mutex: to ring when a slot is back
  std::chrono::steady_clock::time_point stages_waiting_since;  // guarded by mutex
  bool closed = false;                 // guarded by mutex
  std::size_t peak_in_use = 0;         // guarded by mutex
  std::uint64_t acquired = 0;          // guarded by mutex
  std::uint64_t waits = 0;             // guarded by mutex
  std::chrono::nanoseconds waited{0};  // guarded by mutex

 private:
  void free_blocks() noexcept {
    for (BatchSlot& slot : slots) {
      allocator->deallocate(slot.block, bytes_per_slot, BatchPool::slot_alignment);
      slot.block = nullptr;
    }
  }
};

void release_slot(PoolState& pool, BatchSlot& slot) noexcept { pool.release(slot); }

}  // namespace detail

BatchPool::BatchPool(BatchShape shape, std::size_t slots, AllocatorPtr allocator) {
  shape.validate();
  if (slots == 0) throw std::invalid_argument("batch pool (" + shape.describe() + "): needs at least 1 slot");
  if (!allocator) throw std::invalid_argument("batch pool (" + shape.describe() + "): the allocator is null");
  state_ = std::make_shared<detail::PoolState>(shape, slots, std::move(allocator));
}

Batch BatchPool::acquire() {
  std::unique_lock lock(state_->mutex);
  if (state_->closed) state_->throw_closed();
  if (state_->free.empty()) {
    ++state_->waits;
    const auto begin = std::chrono::steady_clock::now();
    state_->available.wait(lock, [&] { return state_->closed || !state_->free.empty(); });
    state_->waited += std::chrono::steady_clock::now() - begin;
    if (state_->closed) state_->throw_closed();
  }
  return Batch(state_, state_->take_locked(), &state_->shape);
}

std::optional<Batch> BatchPool::try_acquire() {
  std::lock_guard lock(state_->mutex);
  if (state_->closed) state_->throw_closed();
  if (state_->free.empty()) return std::nullopt;
  return Batch(state_, state_->take_locked(), &state_->shape);
}

std::optional<Batch> BatchPool::acquire_for(std::chrono::nanoseconds timeout) {
  std::unique_lock lock(state_->mutex);
  if (state_->closed) state_->throw_closed();
  if (state_->free.empty()) {
    ++state_->waits;
    const auto begin = std::chrono::steady_clock::now();
    const bool ready =
        state_->available.wait_for(lock, timeout, [&] { return state_->closed || !state_->free.empty(); });
    state_->waited += std::chrono::steady_clock::now() - begin;
    if (state_->closed) state_->throw_closed();
    if (!ready) return std::nullopt;
  }
  return Batch(state_, state_->take_locked(), &state_->shape);
}

bool BatchPool::ready(const graph::Wake& wake) {
  if (state_->free_count.load(std::memory_order_acquire) > 0) return true;  // the usual case: no lock
  std::lock_guard lock(state_->mutex);
  if (state_->closed || !state_->free.empty()) return true;
  auto& waiting = state_->waiting_stages;
  if (std::find(waiting.begin(), waiting.end(), wake) == waiting.end()) {
    if (waiting.empty()) state_->stages_waiting_since = std::chrono::steady_clock::now();
    waiting.push_back(wake);
    ++state_->waits;  // a stage parks: counted as one wait, timed until a slot comes back
  }
  return false;
}

void BatchPool::close() noexcept {
  {
    std::lock_guard lock(state_->mutex);
    state_->closed = true;
  }
  state_->available.notify_all();
  state_->ring_all();
}

bool BatchPool::closed() const noexcept {
  std::lock_guard lock(state_->mutex);
  return state_->closed;
}

const BatchShape& BatchPool::shape() const noexcept { return state_->shape; }
std::size_t BatchPool::slots() const noexcept { return state_->slots.size(); }
std::size_t BatchPool::bytes_per_slot() const noexcept { return state_->bytes_per_slot; }
const Allocator& BatchPool::allocator() const noexcept { return *state_->allocator; }

BatchPoolStats BatchPool::stats() const {
  std::lock_guard lock(state_->mutex);
  BatchPoolStats s;
  s.slots = state_->slots.size();
  s.free = state_->free.size();
  s.in_use = s.slots - s.free;
  s.peak_in_use = state_->peak_in_use;
  s.acquired = state_->acquired;
  s.waits = state_->waits;
  s.waited = state_->waited;
  s.bytes_per_slot = state_->bytes_per_slot;
  s.closed = state_->closed;
  return s;
}

}  // namespace stoke::nodes
