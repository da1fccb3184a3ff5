// StageBase: what every stage shares -- concurrency control, task spawning, the wake-up protocol
// between neighbours, and the per-stage statistics. Typed stages (stages.hpp) derive from it.
#pragma once

#include <oneapi/tbb/spin_mutex.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "stoke/graph/detail/clock.hpp"
#include "stoke/graph/detail/envelope.hpp"
#include "stoke/graph/detail/runtime.hpp"
#include "stoke/graph/detail/tally.hpp"
#include "stoke/graph/options.hpp"
#include "stoke/graph/stats.hpp"
#include "stoke/graph/wake.hpp"

namespace stoke::graph::detail {

/// Scheduling model. A stage runs tasks on the pipeline's oneTBB arena; each task claims items
/// from the stage's input buffer one after another until none is claimable, so a stage with
/// concurrency c has at most c tasks. Nothing ever blocks a thread: a stage that cannot start
/// (no input, no room downstream, no in-flight credit) parks, and whoever changes that condition
/// wakes it. Parking uses the pattern "set blocked flag, re-check": the waker first changes the
/// condition, then reads the flag, so one of the two always sees the other.
///
/// The slots a stage's tasks hold are counted in one atomic word (with the time the stage last
/// became active), so that the common path -- a task carrying its item into the next stage and
/// leaving this one with nothing queued -- takes no lock: try_take_slot() and give_slot() are a
/// compare-and-swap each. The same "change, then re-check" rule joins it to the locked paths: a
/// push that queues an item stores ready_ and then reads the slots; a leaving task gives its slot
/// back and then reads ready_ (and input_closed_), so an item queued meanwhile always gets a task.
///
/// Where the limit cannot bind -- a concurrency of at least the arena's threads, which is what a
/// parallel stage usually has -- a task carrying an item in does not even count itself there
/// (a carried visit, try_carry()): it marks its own thread's tally, so that the stages of a chain
/// write no cache line another thread also writes, as tbb::parallel_pipeline's parallel filters.
/// Only finishing must see those visits: the stage finishes once its input is closed, nothing is
/// queued and neither slots nor carried visits are left; a carried visit ends with a full fence
/// before it reads input_closed_, and finish_ready_locked() fences after close_input() set it.
///
/// Time: busy is the body calls' time, sampled for short calls (begin_call()); running is the
/// intervals with a slot held plus the carried calls' busy time; blocked is the time parked;
/// starved is the rest of the stage's life. Each visit reads the clock at most twice, around its
/// call, and only one call in sample_stride of the short ones.
class StageBase {
 public:
  StageBase(Runtime& runtime, std::string name, StageKind kind, StageOptions options);
  virtual ~StageBase();
  StageBase(const StageBase&) = delete;
  StageBase& operator=(const StageBase&) = delete;

  /// How a task holds its place in a stage: a counted slot, or a carried visit (see above).
  enum class Visit : std::uint8_t { counted, carried };

  const std::string& name() const noexcept { return name_; }
  StageKind kind() const noexcept { return kind_; }
  const StageOptions& options() const noexcept { return options_; }
  bool parallel() const noexcept { return options_.concurrency.max > 1; }

  /// Wiring, done once by Pipeline::run() before anything starts.
  struct Wiring {
    int id = 0;
    StageBase* upstream = nullptr;        ///< the one stage feeding this one (null: none, or several)
    StageBase* downstream = nullptr;      ///< the one stage this one feeds (null: none, or several)
    std::vector<StageBase*> upstreams;    ///< when several feed this one (after a join's inputs)
    std::vector<StageBase*> downstreams;  ///< when this one feeds several (a fan-out)
    bool gated = false;                   ///< input is released in seq order
    bool forward_holes = false;           ///< some ordered stage (or join) downstream needs this stage's holes
  };
  void wire(const Wiring& wiring);
  /// The stages this one hands items to (null where nothing is attached yet). Build time only.
  virtual std::vector<StageBase*> outputs() const = 0;
  /// Called once after wire(), before the run starts.
  virtual void on_wired() {}
  /// Starts the stage's clocks; from now on it may start tasks.
  void start(Runtime& runtime);

  /// Starts as many tasks as there is claimable work and free concurrency.
  void wake();
  /// One task's work: claim an item, process it, hand it on. Entered holding a slot that
  /// plan_spawns_locked() (or push's follow reservation) counted in active_ and starting_.
  virtual void run_task() = 0;
  void set_concurrency(int concurrency);
  void set_capacity(std::size_t capacity);
  StageStats stats() const;
  bool finished() const;

  /// The body call each thread with a tally of its own is in now, as Tally::calling words (0:
  /// none); read by the stall watchdog.
  void calls_in_progress(std::vector<std::uint64_t>& words) const {
    words.resize(tally_slots - 1);
    for (std::size_t slot = 0; slot + 1 < tally_slots; ++slot)
      words[slot] = tallies_.slots()[slot].calling.load(std::memory_order_acquire);
  }
  /// The source index in a Tally::calling word.
  static std::uint64_t called_index(std::uint64_t word) noexcept { return (word >> 8) - 1; }

  /// Room in this stage's input buffer (read by the upstream stage, without a lock).
  bool has_room() const noexcept {
    return ready_.load(std::memory_order_seq_cst) < capacity_.load(std::memory_order_relaxed);
  }

 protected:
  /// RAII: holds the stage's lock.
  class Locked {
   public:
    explicit Locked(const StageBase& stage) : lock_(stage.mutex_) {}

   private:
    std::lock_guard<tbb::spin_mutex> lock_;
  };

  // ---- slots: tasks of this stage, running or about to ---------------------------------------
  /// Tasks holding a slot (running, or spawned and not yet claiming). Any thread.
  int active() const noexcept { return active_in(work_.load()); }
  /// Carried visits under way (a sum over the threads' tallies). Any thread.
  int carried() const noexcept { return tallies_.sum(&Tally::carried); }
  /// Enters a carried visit if the limit cannot bind (at least the arena's threads), the stage
  /// allows them and the thread has a tally of its own; writes only that tally. A carried visit
  /// reads no clock: the stage counts as running while its calls run (their busy time).
  bool try_carry() noexcept {
    if (!carriable_ || limit() < runtime_.concurrency() || !owns_tally_slot()) return false;
    Tally& mine = tallies_.mine();
    mine.carried.store(mine.carried.load(std::memory_order_relaxed) + 1, std::memory_order_release);
    return true;
  }
  /// Ends a carried visit, then fences: whatever the task reads next (input_closed_) is read
  /// after every thread can see the visit is over.
  void end_carry() noexcept {
    Tally& mine = tallies_.mine();
    mine.carried.store(mine.carried.load(std::memory_order_relaxed) - 1, std::memory_order_release);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  /// Gives back what `visit` holds (a slot, or the carried visit).
  void release(Visit visit, std::int64_t now = 0) noexcept {
    if (visit == Visit::carried)
      end_carry();
    else
      give_slot(now);
  }
  /// Takes a slot if fewer than the concurrency limit are held; lock-free. The first slot opens
  /// the stage's running interval at `now` (0: the clock is read, only then).
  bool try_take_slot(std::int64_t now = 0) noexcept;
  /// Takes up to `wanted` slots below the limit and returns how many it took; lock-free.
  int take_slots(int wanted) noexcept;
  /// Gives a slot back; lock-free. The last one closes the running interval at `now` (0: the
  /// clock is read, only then).
  void give_slot(std::int64_t now = 0) noexcept;
  /// A task is done with this stage and gives its place back (release()) without the lock,
  /// unless an item was queued meanwhile or the input closed: then it starts what that needs (a
  /// task, or the stage's finish).
  void leave(Visit visit, std::int64_t now = 0) {
    release(visit, now);
    if (ready_.load(std::memory_order_seq_cst) != 0 || input_closed_.load(std::memory_order_seq_cst)) [[unlikely]]
      leave_slow();
  }

  /// How many more tasks could claim work right now (called locked).
  virtual std::size_t claimable_locked() = 0;
  /// The stage is done: flush, clean up, close the downstream input.
  virtual void on_finish() = 0;
  /// Items waiting, reorder buffer included (called locked).
  virtual std::size_t queued_locked() const = 0;

  /// Decides how many tasks to start (locked); pass the result to spawn() after unlocking.
  int plan_spawns_locked() {
    if (!running_ || finishing_ || active() >= limit()) return 0;
    const std::size_t claimable = claimable_locked();
    if (claimable <= static_cast<std::size_t>(starting_)) return 0;
    const int tasks = take_slots(static_cast<int>(
        std::min<std::size_t>(claimable - static_cast<std::size_t>(starting_), static_cast<std::size_t>(limit()))));
    starting_ += tasks;
    return tasks;
  }
  void spawn(int tasks);
  /// Room downstream, or park until the downstream stage frees some (called locked).
  bool room_or_park_locked();
  /// Tells the upstream stage that this stage's input buffer has room again.
  void notify_upstream() noexcept;
  /// True once, when the input is closed and nothing is left to do (called locked).
  bool finish_ready_locked() {
    if (!input_closed_.load() || finishing_ || active() != 0 || queued_locked() != 0) return false;
    std::atomic_thread_fence(std::memory_order_seq_cst);  // input_closed_ before the tallies (see above)
    if (carried() != 0) return false;
    if (gated_ && !runtime_.cancelled() && !gate_open_flag_locked(true)) [[unlikely]]
      return false;
    finishing_ = true;
    return true;
  }

  /// A gated body (concepts.hpp): the typed stage calls make_gated() in its constructor and
  /// answers gate_open_locked() from the body's ready() (flush: ready_to_flush()).
  void make_gated();
  const Wake& wake_handle() const noexcept { return *wake_; }
  virtual bool gate_open_locked(bool /*flush*/) { return true; }
  /// The gate lets a call start (always, for a body without one). Called locked, while running.
  bool gate_locked() { return !gated_ || gate_open_flag_locked(false); }
  /// Asks the body's gate; while it is closed, the stage holds the run open (Runtime::hold())
  /// until the ring (or a cancel) wakes it. Out of line: only gated stages get here.
  [[gnu::cold]] bool gate_open_flag_locked(bool flush);
  void finish();

  void note_queue_locked() noexcept;

  /// When a body call began (ticks) and what its time stands for, or {0, 0} for a call that is
  /// not timed.
  struct CallTiming {
    std::int64_t begin = 0;
    int weight = 0;
  };
  /// RAII around a body call: marks the call in the calling thread's tally while the stall
  /// watchdog runs (Runtime::watching()), so that it can tell a call that does not return.
  class WatchedCall {
   public:
    WatchedCall(StageBase& stage, std::uint64_t index) noexcept
        : tally_(stage.runtime_.watching() && owns_tally_slot() ? &stage.tallies_.mine() : nullptr) {
      if (tally_ == nullptr) return;
      ++tally_->calls;
      tally_->calling.store((index + 1) << 8 | tally_->calls, std::memory_order_release);
    }
    ~WatchedCall() {
      if (tally_ != nullptr) tally_->calling.store(0, std::memory_order_release);
    }
    WatchedCall(const WatchedCall&) = delete;
    WatchedCall& operator=(const WatchedCall&) = delete;

   private:
    Tally* tally_;
  };

  /// Whether and how to time the body call about to start. Reading the clock twice costs about
  /// as much as the executor's own work per item and stage, so calls shorter than
  /// Runtime::short_call_ticks() are timed one in sample_stride, each standing for the
  /// sample_stride calls around it; longer ones (and every call while tracing) are all timed.
  CallTiming begin_call() noexcept {
    if (runtime_.tracing() || !owns_tally_slot()) return {ticks(), 1};
    Tally& mine = tallies_.mine();
    if (mine.untimed_left > 0) {
      --mine.untimed_left;
      return {};
    }
    mine.untimed_left = mine.stride - 1;
    return {ticks(), mine.stride};
  }
  static constexpr int sample_stride = 8;
  /// Adds a body call (timed by begin_call(), or as {ticks(), 1}) to the busy time, and to the
  /// trace; returns the ticks at its end, 0 when it was not timed.
  std::int64_t account(std::uint64_t index, CallTiming call);
  /// A body call failed: skipped and listed (OnError::skip) or the run fails (OnError::fail).
  void fail_or_skip(std::uint64_t index, std::exception_ptr error);

  /// Room downstream (in every branch after a fan-out), without parking: the lock-free path's
  /// check, which falls back to the locked one (that parks) when there is none.
  bool room_downstream() const noexcept;
  /// The stage parks (no room downstream, no credit, its gate closed): its blocked time runs
  /// until the next wake(). Called locked.
  void note_parked_locked() noexcept {
    if (parked_since_ == 0) parked_since_ = ticks() | 1;
  }
  int limit() const noexcept { return limit_.load(std::memory_order_relaxed); }

  // The members are grouped by who writes them, so that what every item reads does not share a
  // cache line with what some items write (two cores taking turns on a line cost more than the
  // executor's own work per item and stage). Read on every visit, written rarely:
  Runtime& runtime_;
  const std::string name_;
  const StageKind kind_;
  const StageOptions options_;
  Wiring wiring_;
  std::atomic<int> limit_;  // concurrency; written locked, read anywhere
  std::atomic<std::size_t> capacity_;
  bool gated_ = false;     // the body has ready(): see make_gated()
  bool carriable_ = true;  // false where a task's place outlives its call (async)
  std::shared_ptr<Doorbell> doorbell_;
  std::optional<Wake> wake_;

  // The input buffer's state: read by every visit and by the stage in front (its room check),
  // written where items queue, park or wake.
  alignas(64) std::atomic<std::size_t> ready_{0};  // claimable items in the input buffer
  std::atomic<bool> input_closed_{false};          // written locked, read by leave()
  std::atomic<bool> blocked_{false};               // parked for lack of room downstream

  // A spin lock (oneTBB's, which backs off by yielding): every section it guards is a few dozen
  // instructions, taken where items queue or stages park and wake -- not on the carried path.
  alignas(64) mutable tbb::spin_mutex mutex_;
  // Guarded by mutex_:
  int starting_ = 0;  // tasks spawned that have not yet tried to claim
  bool running_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  std::size_t peak_queued_ = 0;
  std::optional<tbb::task_handle> gate_hold_;  // held while the gate is closed

  // Added to by every item: one cache line per thread (tally.hpp), summed by stats().
  mutable Tallies tallies_;  // mutable: stats() closes the running interval it reads
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> skipped_{0};

 private:
  // work_: the slots held (low active_bits bits) and, above them, the tick (>> tick_shift, modulo
  // 2^(64 - active_bits)) at which the count last rose from 0. Intervals are taken modulo that
  // range, which at 3 GHz is 17 days; stats() restarts a long one.
  static constexpr unsigned active_bits = 16;
  static constexpr unsigned tick_shift = 4;
  static constexpr std::uint64_t active_mask = (std::uint64_t{1} << active_bits) - 1;
  static int active_in(std::uint64_t word) noexcept { return static_cast<int>(word & active_mask); }
  static std::uint64_t stamp(std::int64_t now) noexcept {
    return static_cast<std::uint64_t>(now) >> tick_shift << active_bits;
  }
  /// Ticks from the stamp in `word` to `now`.
  static std::int64_t since(std::uint64_t word, std::int64_t now) noexcept {
    return static_cast<std::int64_t>(((stamp(now) - (word & ~active_mask)) >> active_bits) << tick_shift);
  }
  void leave_slow();

  // Compare-and-swapped by every visit of a stage whose tasks are counted: a line of its own.
  alignas(64) mutable std::atomic<std::uint64_t> work_{0};  // mutable: stats() restarts the open interval
  // Guarded by mutex_:
  std::int64_t parked_since_ = 0;  // ticks | 1 while parked, else 0
  std::int64_t blocked_ticks_ = 0;
  std::int64_t finished_ticks_ = 0;
  std::int64_t started_ticks_ = 0;
};

// ---- the lock-free path, inline: it runs once or twice per item and stage ------------------

inline bool StageBase::try_take_slot(std::int64_t now) noexcept {
  std::uint64_t word = work_.load();
  for (;;) {
    const int held = active_in(word);
    if (held >= limit()) return false;
    const std::uint64_t next = held == 0 ? stamp(now != 0 ? now : ticks()) | 1 : word + 1;
    if (work_.compare_exchange_weak(word, next)) return true;
  }
}

inline int StageBase::take_slots(int wanted) noexcept {
  std::uint64_t word = work_.load();
  for (;;) {
    const int held = active_in(word);
    const int tasks = std::min(wanted, limit() - held);
    if (tasks <= 0) return 0;
    const std::uint64_t next = (held == 0 ? stamp(ticks()) : word) + static_cast<std::uint64_t>(tasks);
    if (work_.compare_exchange_weak(word, next)) return tasks;
  }
}

inline void StageBase::give_slot(std::int64_t now) noexcept {
  std::uint64_t word = work_.load();
  for (;;) {
    if (active_in(word) != 1) {
      if (work_.compare_exchange_weak(word, word - 1)) return;
      continue;
    }
    // The last slot: the running interval that began at the stamp ends now.
    if (now == 0) now = ticks();
    if (work_.compare_exchange_weak(word, stamp(now))) {
      tallies_.add(&Tally::running, since(word, now));
      return;
    }
  }
}

inline bool StageBase::room_downstream() const noexcept {
  if (const StageBase* down = wiring_.downstream) return down->has_room();
  for (const StageBase* stage : wiring_.downstreams)
    if (!stage->has_room()) return false;
  return true;
}

}  // namespace stoke::graph::detail
