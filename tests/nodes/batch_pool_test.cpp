// BatchPool and Batch: memory bounded by the slot count, blocking acquire, close() waking waiters,
// one allocation per slot from a custom allocator, and the slot layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <stoke/nodes/allocator.hpp>
#include <stoke/nodes/batch_pool.hpp>
#include <thread>
#include <vector>

namespace stoke::nodes {
namespace {

using namespace std::chrono_literals;

/// Only there to keep a broken pool from hanging the suite; never used to judge speed.
constexpr auto safety_deadline = 30s;

template <class Predicate>
bool wait_until(Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + safety_deadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

const BatchShape small_u8{.batch_size = 4, .height = 8, .width = 6, .channels = 3, .layout = BatchLayout::nhwc};
const BatchShape small_f32{.batch_size = 3, .height = 5, .width = 7, .channels = 3, .layout = BatchLayout::nchw, .pixel_type = ElementType::f32};

/// Host memory, recording every call.
class CountingAllocator final : public Allocator {
 public:
  struct Block {
    std::size_t bytes;
    std::size_t alignment;
  };

  std::string_view name() const noexcept override { return "counting"; }

  int allocations() const {
    std::lock_guard lock(mutex_);
    return allocations_;
  }
  int deallocations() const {
    std::lock_guard lock(mutex_);
    return deallocations_;
  }
  std::size_t live_blocks() const {
    std::lock_guard lock(mutex_);
    return live_.size();
  }
  std::vector<Block> blocks() const {
    std::lock_guard lock(mutex_);
    std::vector<Block> all;
    for (const auto& [pointer, block] : live_) all.push_back(block);
    return all;
  }
  /// Frees whose size or alignment did not match the allocation (undefined behaviour for real).
  int mismatches() const {
    std::lock_guard lock(mutex_);
    return mismatches_;
  }
  /// Makes the n-th allocation (1-based) fail.
  void fail_at(int n) { fail_at_ = n; }

 protected:
  void* allocate_impl(std::size_t bytes, std::size_t alignment) override {
    std::lock_guard lock(mutex_);
    if (++allocations_ == fail_at_) return nullptr;
    void* p = host_->allocate(bytes, alignment);
    live_[p] = Block{bytes, alignment};
    return p;
  }
  void deallocate_impl(void* block, std::size_t bytes, std::size_t alignment) noexcept override {
    std::lock_guard lock(mutex_);
    ++deallocations_;
    const auto it = live_.find(block);
    if (it == live_.end() || it->second.bytes != bytes || it->second.alignment != alignment) {
      ++mismatches_;
      return;
    }
    live_.erase(it);
    host_->deallocate(block, bytes, alignment);
  }

 private:
  AllocatorPtr host_ = host_allocator();
  mutable std::mutex mutex_;
  std::map<void*, Block> live_;
  int allocations_ = 0;
  int deallocations_ = 0;
  int mismatches_ = 0;
  int fail_at_ = 0;
};

TEST(BatchShape, SizesFollowTheLayout) {
  EXPECT_EQ(small_u8.item_elements(), 8u * 6 * 3);
  EXPECT_EQ(small_u8.item_bytes(), 8u * 6 * 3);
  EXPECT_EQ(small_u8.data_bytes(), 4u * 8 * 6 * 3);
  EXPECT_EQ(small_f32.element_size(), 4u);
  EXPECT_EQ(small_f32.item_bytes(), 5u * 7 * 3 * 4);
  EXPECT_EQ(small_f32.data_bytes(), 3u * 5 * 7 * 3 * 4);
}

TEST(BatchShape, ValidateNamesTheBadField) {
  BatchShape shape = small_u8;
  shape.width = 0;
  try {
    shape.validate();
    FAIL() << "a zero width was accepted";
  } catch (const std::invalid_argument& error) {
    EXPECT_NE(std::string(error.what()).find("width"), std::string::npos) << error.what();
  }
  EXPECT_THROW(BatchPool(BatchShape{.batch_size = 0, .height = 2, .width = 2}, 2), std::invalid_argument);
  EXPECT_THROW(BatchPool(small_u8, 0), std::invalid_argument);
  EXPECT_THROW(BatchPool(small_u8, 2, nullptr), std::invalid_argument);
}

TEST(BatchPool, AcquireGivesAnEmptyBatchOfThePoolsShape) {
  BatchPool pool(small_u8, 2);
  Batch batch = pool.acquire();
  ASSERT_TRUE(batch.valid());
  EXPECT_EQ(batch.shape(), small_u8);
  EXPECT_EQ(batch.capacity(), 4u);
  EXPECT_EQ(batch.size(), 0u);
  EXPECT_TRUE(batch.data().empty());
  EXPECT_TRUE(batch.labels().empty());
  batch.set_size(4);
  EXPECT_TRUE(batch.full());
  EXPECT_EQ(batch.data().size(), small_u8.data_bytes());
  EXPECT_EQ(batch.u8().size(), small_u8.data_bytes());
  EXPECT_EQ(batch.labels().size(), 4u);
  EXPECT_EQ(batch.indices().size(), 4u);
  EXPECT_EQ(batch.names().size(), 4u);
  EXPECT_THROW(batch.set_size(5), std::out_of_range);
  EXPECT_THROW((void)batch.f32(), std::logic_error);
  EXPECT_LT(batch.slot(), 2u);
}

TEST(BatchPool, ReacquiredSlotIsResetToEmpty) {
  BatchPool pool(small_u8, 1);
  {
    Batch batch = pool.acquire();
    batch.set_size(3);
    batch.set_epoch(7);
  }
  Batch again = pool.acquire();
  EXPECT_EQ(again.size(), 0u);
  EXPECT_EQ(again.epoch(), 0u);
}

TEST(BatchPool, SlotPartsAreAlignedAndDoNotOverlap) {
  for (const BatchShape& shape : {small_u8, small_f32}) {
    BatchPool pool(shape, 2);
    Batch batch = pool.acquire();
    batch.set_size(shape.batch_size);
    const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
    EXPECT_EQ(address(batch.data().data()) % BatchPool::slot_alignment, 0u);
    EXPECT_EQ(address(batch.labels().data()) % 64, 0u);
    EXPECT_EQ(address(batch.indices().data()) % 64, 0u);

    std::fill(batch.data().begin(), batch.data().end(), std::byte{0xAB});
    for (std::size_t i = 0; i < batch.size(); ++i) {
      batch.labels()[i] = -static_cast<std::int32_t>(i) - 1;
      batch.indices()[i] = 0xFFFF'FFFF'FFFF'FFF0ULL + i;
    }
    EXPECT_TRUE(
        std::all_of(batch.data().begin(), batch.data().end(), [](std::byte b) { return b == std::byte{0xAB}; }));
    for (std::size_t i = 0; i < batch.size(); ++i) {
      EXPECT_EQ(batch.labels()[i], -static_cast<std::int32_t>(i) - 1);
      EXPECT_EQ(batch.indices()[i], 0xFFFF'FFFF'FFFF'FFF0ULL + i);
    }
    EXPECT_GE(pool.bytes_per_slot(), shape.data_bytes() + shape.batch_size * (4 + 8));
    EXPECT_EQ(pool.total_bytes(), 2 * pool.bytes_per_slot());
  }
}

TEST(BatchPool, MasksAndTargetsHaveTheirOwnAlignedPartsOfTheBlock) {
  const BatchShape shape{.batch_size = 3, .height = 5, .width = 7, .channels = 1, .pixel_type = ElementType::u16,
                         .mask = ElementType::i32, .targets = {{"age"}, {"box", {2, 2}}}};
  const BatchBlock layout = block_layout(shape, 64);
  EXPECT_EQ(layout.pixels, 0u);
  EXPECT_EQ(layout.mask, 256u);                      // 3 x 5x7 x 2 bytes = 210, padded to 64
  EXPECT_EQ(layout.labels, 256u + 448u);             // 3 x 5x7 x 4 bytes = 420 -> 448
  EXPECT_EQ(layout.indices, layout.labels + 64u);
  EXPECT_EQ(layout.targets, (std::vector<std::size_t>{layout.indices + 64u, layout.indices + 128u}));
  EXPECT_EQ(layout.bytes, layout.indices + 128u + 64u);  // 3 x 4 floats = 48 -> 64

  BatchPool pool(shape, 1);
  EXPECT_EQ(pool.bytes_per_slot(), layout.bytes);
  Batch batch = pool.acquire();
  batch.set_size(3);
  const auto at = [&](const void* p) { return static_cast<std::size_t>(static_cast<const std::byte*>(p) - batch.data().data()); };
  EXPECT_EQ(at(batch.mask().data()), layout.mask);
  EXPECT_EQ(at(batch.labels().data()), layout.labels);
  EXPECT_EQ(at(batch.target("box").data()), layout.targets[1]);
  EXPECT_EQ(batch.target("box").size(), 12u);
  EXPECT_EQ(batch.mask().size(), 3u * 5 * 7 * 4);
  batch.set_size(1);
  EXPECT_EQ(batch.target(0).size(), 1u);
  EXPECT_EQ(shape.describe(), "3 x 5x7x1 nhwc u16 + mask i32 + targets age, box[2x2]");
}

TEST(BatchShape, ValidateRefusesFieldsThatCannotBeBatched) {
  const auto refuses = [](BatchShape shape, const std::string& what) {
    try {
      shape.validate();
    } catch (const std::invalid_argument& error) {
      return std::string(error.what()).find(what) != std::string::npos;
    }
    return false;
  };
  const BatchShape base{.batch_size = 2, .height = 4, .width = 4};
  EXPECT_TRUE(refuses({.batch_size = 2, .height = 4, .width = 4, .layout = BatchLayout::nchw}, "set pixel_type = f32"));
  BatchShape shape = base;
  shape.mask = ElementType::f32;
  EXPECT_TRUE(refuses(shape, "a mask holds class ids"));
  shape = base;
  shape.targets = {{"age"}, {"age"}};
  EXPECT_TRUE(refuses(shape, "target 'age' is named twice"));
  shape.targets = {{"box", {4, 0}}};
  EXPECT_TRUE(refuses(shape, "target 'box' has a dimension that is not positive"));
  shape.targets = {{""}};
  EXPECT_TRUE(refuses(shape, "target 0 has no name"));
}

TEST(BatchPool, F32BatchHasFloatView) {
  BatchPool pool(small_f32, 1);
  Batch batch = pool.acquire();
  batch.set_size(2);
  EXPECT_EQ(batch.f32().size(), 2 * small_f32.item_elements());
  EXPECT_THROW((void)batch.u8(), std::logic_error);
}

TEST(Batch, MoveTransfersTheSlotAndReleaseIsIdempotent) {
  BatchPool pool(small_u8, 2);
  Batch a = pool.acquire();
  const std::size_t slot = a.slot();
  Batch b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): a moved-from Batch is empty by contract
  EXPECT_TRUE(a.data().empty());
  ASSERT_TRUE(b.valid());
  EXPECT_EQ(b.slot(), slot);
  EXPECT_EQ(pool.stats().free, 1u);

  Batch c = pool.acquire();
  EXPECT_EQ(pool.stats().free, 0u);
  c = std::move(b);  // c's own slot goes back
  EXPECT_EQ(pool.stats().free, 1u);
  EXPECT_EQ(c.slot(), slot);
  c.release();
  c.release();
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(pool.stats().free, 2u);
}

// Eight threads hammer a pool of three slots; a live count shows at no moment more than three
// batches exist, and every slot comes back.
TEST(BatchPool, NeverMoreBatchesLiveThanSlots) {
  constexpr std::size_t slots = 3;
  BatchPool pool(small_u8, slots);
  std::atomic<int> live{0};
  std::atomic<int> most{0};
  std::atomic<int> seen_slot_twice{0};
  std::vector<std::atomic<int>> holders(slots);
  const auto work = [&] {
    for (int round = 0; round < 300; ++round) {
      Batch batch = pool.acquire();
      if (holders[batch.slot()].fetch_add(1) != 0) seen_slot_twice.fetch_add(1);
      const int now = live.fetch_add(1) + 1;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::yield();
      live.fetch_sub(1);
      holders[batch.slot()].fetch_sub(1);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();

  EXPECT_LE(most.load(), static_cast<int>(slots));
  EXPECT_EQ(seen_slot_twice.load(), 0) << "a slot was handed to two batches at once";
  const BatchPoolStats stats = pool.stats();
  EXPECT_EQ(stats.free, slots);
  EXPECT_EQ(stats.in_use, 0u);
  EXPECT_LE(stats.peak_in_use, slots);
  EXPECT_EQ(stats.acquired, 8u * 300);
}

TEST(BatchPool, AcquireBlocksUntilABatchIsReleased) {
  BatchPool pool(small_u8, 2);
  Batch first = pool.acquire();
  Batch second = pool.acquire();
  EXPECT_FALSE(pool.try_acquire().has_value());
  EXPECT_FALSE(pool.acquire_for(1ms).has_value());
  const std::uint64_t waits_before = pool.stats().waits;

  std::atomic<bool> acquired{false};
  auto waiter = std::async(std::launch::async, [&] {
    Batch batch = pool.acquire();
    acquired.store(true);
    return batch.slot();
  });
  // The waiter is blocked once the pool has counted its wait; it cannot have a slot yet.
  ASSERT_TRUE(wait_until([&] { return pool.stats().waits > waits_before; }));
  EXPECT_FALSE(acquired.load());
  EXPECT_EQ(pool.stats().free, 0u);

  const std::size_t released = second.slot();
  second.release();
  ASSERT_EQ(waiter.wait_for(safety_deadline), std::future_status::ready) << "the release did not wake acquire()";
  EXPECT_EQ(waiter.get(), released);
  EXPECT_TRUE(acquired.load());
  EXPECT_EQ(pool.stats().free, 1u);  // the waiter's batch died with its thread
  EXPECT_GT(pool.stats().waited.count(), 0);
}

TEST(BatchPool, CloseWakesABlockedAcquireWithAnException) {
  BatchPool pool(small_u8, 1);
  Batch held = pool.acquire();
  auto waiter = std::async(std::launch::async, [&] { (void)pool.acquire(); });
  ASSERT_TRUE(wait_until([&] { return pool.stats().waits == 1; }));

  pool.close();
  ASSERT_EQ(waiter.wait_for(safety_deadline), std::future_status::ready) << "close() did not wake acquire()";
  try {
    waiter.get();
    FAIL() << "acquire() returned from a closed pool";
  } catch (const PoolClosed& error) {
    EXPECT_NE(std::string(error.what()).find("closed"), std::string::npos) << error.what();
  }
  EXPECT_TRUE(pool.closed());
  EXPECT_THROW((void)pool.acquire(), PoolClosed);
  EXPECT_THROW((void)pool.try_acquire(), PoolClosed);
  EXPECT_THROW((void)pool.acquire_for(1ms), PoolClosed);

  // A batch that was out when the pool closed stays usable and still comes back.
  held.set_size(1);
  held.labels()[0] = 5;
  held.release();
  EXPECT_EQ(pool.stats().free, 1u);
}

TEST(BatchPool, CustomAllocatorIsCalledOncePerSlotAndFreedAtTheEnd) {
  auto allocator = std::make_shared<CountingAllocator>();
  std::optional<Batch> survivor;
  {
    BatchPool pool(small_f32, 5, allocator);
    EXPECT_EQ(allocator->allocations(), 5);
    EXPECT_EQ(allocator->live_blocks(), 5u);
    EXPECT_EQ(pool.allocator().name(), "counting");
    for (const auto& block : allocator->blocks()) {
      EXPECT_EQ(block.bytes, pool.bytes_per_slot());
      EXPECT_EQ(block.alignment, BatchPool::slot_alignment);
    }
    // Using the pool allocates nothing more.
    for (int i = 0; i < 20; ++i) {
      Batch batch = pool.acquire();
      batch.set_size(2);
    }
    survivor = pool.acquire();
    EXPECT_EQ(allocator->allocations(), 5);
  }
  // The handle is gone but a batch is out: the pool's memory must still be there.
  EXPECT_EQ(allocator->deallocations(), 0);
  survivor->set_size(3);
  std::fill(survivor->data().begin(), survivor->data().end(), std::byte{1});
  survivor.reset();
  EXPECT_EQ(allocator->deallocations(), 5);
  EXPECT_EQ(allocator->live_blocks(), 0u);
  EXPECT_EQ(allocator->mismatches(), 0);
}

TEST(BatchPool, AllocationFailureFreesTheSlotsAlreadyAllocated) {
  auto allocator = std::make_shared<CountingAllocator>();
  allocator->fail_at(3);
  try {
    BatchPool pool(small_u8, 4, allocator);
    FAIL() << "the pool was built although an allocation failed";
  } catch (const AllocationError& error) {
    EXPECT_NE(std::string(error.what()).find("counting"), std::string::npos) << error.what();
  }
  EXPECT_EQ(allocator->allocations(), 3);
  EXPECT_EQ(allocator->deallocations(), 2);
  EXPECT_EQ(allocator->live_blocks(), 0u);
}

TEST(HostAllocator, RejectsBadArgumentsAndHonoursAlignment) {
  auto host = host_allocator();
  EXPECT_EQ(host->name(), "host");
  EXPECT_THROW(host->allocate(0, 64), std::invalid_argument);
  EXPECT_THROW(host->allocate(64, 48), std::invalid_argument);
  void* p = host->allocate(1000, 4096);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 4096, 0u);
  host->deallocate(p, 1000, 4096);
  host->deallocate(nullptr, 1000, 4096);
}

}  // namespace
}  // namespace stoke::nodes
