// BatchPool: a fixed set of batch slots allocated up front. Its size is the prefetch depth: the
// batch stage waits for a free slot, so batch memory is bounded by construction (slots x
// bytes_per_slot), whatever the dataset's size.
//
//   stoke::nodes::BatchPool pool({.batch_size = 64, .height = 224, .width = 224}, 4);
//   stoke::nodes::Batch batch = pool.acquire();  // blocks while all 4 are in use (a pipeline's
//                                                 // batch stage parks instead: see ready())
//   ...                                           // fill, hand downstream
//   // ~Batch gives the slot back
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "stoke/graph/wake.hpp"
#include "stoke/nodes/allocator.hpp"
#include "stoke/nodes/batch.hpp"

namespace stoke::nodes {

/// Thrown by acquire() on a closed pool, and by an acquire() blocked when close() is called.
class PoolClosed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A snapshot of a pool's use.
struct BatchPoolStats {
  std::size_t slots = 0;
  std::size_t free = 0;                ///< slots not held by a Batch now
  std::size_t in_use = 0;              ///< slots - free
  std::size_t peak_in_use = 0;         ///< the most slots ever held at once
  std::uint64_t acquired = 0;          ///< successful acquisitions
  /// Acquisitions that found no free slot and had to wait, and stages that parked (ready()).
  std::uint64_t waits = 0;
  std::chrono::nanoseconds waited{0};  ///< total time spent waiting for a slot (threads or stages)
  std::size_t bytes_per_slot = 0;      ///< every field of a batch, with alignment padding
  bool closed = false;
};

/// A handle to a pool of `slots` batch slots of one BatchShape. Copies share the same pool; the
/// pool's memory is freed when the last handle and the last Batch are gone (a Batch keeps the
/// pool alive, so the order of destruction does not matter). All members are thread-safe; a
/// moved-from handle may only be destroyed or assigned to.
///
/// Each slot is one allocation from the Allocator (exactly `slots` calls, all in the
/// constructor; all freed together at the end), laid out by block_layout(shape, 64): the pixel
/// data, the masks, labels (int32), indices (uint64) and targets (float32), each aligned to 64
/// bytes, the block to slot_alignment. The GPU layer passes
/// an allocator of pinned memory so that one async copy per part moves a batch to the device.
class BatchPool {
 public:
  /// Alignment of every slot's block (a page: pinned-memory registration works on pages).
  static constexpr std::size_t slot_alignment = 4096;
  /// Alignment of every field inside a slot's block (block_layout(shape, part_alignment)): a cache
  /// line, and enough for any element type.
  static constexpr std::size_t part_alignment = 64;

  /// Allocates every slot. Throws std::invalid_argument for a bad shape or 0 slots (naming it),
  /// AllocationError when the allocator runs out (nothing is leaked).
  BatchPool(BatchShape shape, std::size_t slots, AllocatorPtr allocator = host_allocator());

  /// A free slot, waiting until one is released. Items: size() 0, epoch 0. Throws PoolClosed when
  /// the pool is closed, before or during the wait.
  Batch acquire();
  /// A free slot, or nullopt at once when none is. Throws PoolClosed when closed.
  std::optional<Batch> try_acquire();
  /// For a gated stage body (stoke::graph::Gated): true when a slot is free (or the pool is
  /// closed, so that acquire() throws rather than waits). Otherwise keeps `wake` and rings it once
  /// a slot comes back: the stage parks without a thread in the meantime. A stage that is the
  /// pool's only taker and asks before each acquire() never waits in acquire().
  bool ready(const graph::Wake& wake);
  /// A free slot, or nullopt when none came free within `timeout`. Throws PoolClosed when closed.
  std::optional<Batch> acquire_for(std::chrono::nanoseconds timeout);

  /// Closes the pool: every acquire, waiting or future, throws PoolClosed, so that a stage blocked
  /// on a slot that will never come back (its consumer was cancelled) does not hang. Batches out
  /// stay valid and still come back. Irreversible; idempotent.
  void close() noexcept;
  bool closed() const noexcept;

  const BatchShape& shape() const noexcept;
  std::size_t slots() const noexcept;
  std::size_t bytes_per_slot() const noexcept;
  /// slots() * bytes_per_slot(): the pool's whole footprint.
  std::size_t total_bytes() const noexcept { return slots() * bytes_per_slot(); }
  const Allocator& allocator() const noexcept;
  BatchPoolStats stats() const;

 private:
  std::shared_ptr<detail::PoolState> state_;
};

}  // namespace stoke::nodes
