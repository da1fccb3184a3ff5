// StageBase: what every stage shares -- concurrency control, task spawning, the wake-up protocol
// between neighbours, and the per-stage statistics. Typed stages (stages.hpp) derive from it.
#pragma once

#include <oneapi/tbb/spin_mutex.h>
#include <oneapi/tbb/task_group.h>

#include <atomic>
#include <cstddef>
#include <algorithm>
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
#include "stoke/graph/detail/sharded_counter.hpp"
#include "stoke/graph/options.hpp"
#include "stoke/graph/stats.hpp"
#include "stoke/graph/wake.hpp"

namespace stoke::graph::detail {

/// Scheduling model. A stage runs tasks on the pipeline's oneTBB flow graph; each task claims
/// items from the stage's input buffer one after another until none is claimable, so a stage
/// with concurrency c has at most c tasks. Nothing ever blocks a thread: a stage that cannot
/// start (no input, no room downstream, no in-flight credit) parks, and whoever changes that
/// condition wakes it. Parking uses the pattern "set blocked flag, re-check": the waker first
/// changes the condition, then reads the flag, so one of the two always sees the other.
class StageBase {
 public:
  StageBase(Runtime& runtime, std::string name, StageKind kind, StageOptions options);
  virtual ~StageBase();
  StageBase(const StageBase&) = delete;
  StageBase& operator=(const StageBase&) = delete;

  const std::string& name() const noexcept { return name_; }
  StageKind kind() const noexcept { return kind_; }
  const StageOptions& options() const noexcept { return options_; }
  bool parallel() const noexcept { return options_.concurrency.max > 1; }

  /// Wiring, done once by Pipeline::run() before anything starts.
  struct Wiring {
    int id = 0;
    StageBase* upstream = nullptr;    ///< the one stage feeding this one (null: none, or several)
    StageBase* downstream = nullptr;  ///< the one stage this one feeds (null: none, or several)
    std::vector<StageBase*> upstreams;    ///< when several feed this one (after a join's inputs)
    std::vector<StageBase*> downstreams;  ///< when this one feeds several (a fan-out)
    bool gated = false;          ///< input is released in seq order
    bool forward_holes = false;  ///< some ordered stage (or join) downstream needs this stage's holes
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

  /// Room in this stage's input buffer (read by the upstream stage, without a lock).
  bool has_room() const noexcept {
    return ready_.load(std::memory_order_seq_cst) < capacity_.load(std::memory_order_relaxed);
  }

 protected:
  /// RAII: locks the stage; on unlock, if the stage's state (starved/blocked/running) changed,
  /// closes the interval of the old state. The clock is read only on such transitions.
  class Locked {
   public:
    explicit Locked(const StageBase& stage) : stage_(stage), lock_(stage.mutex_) {}
    ~Locked() {
      // The common case, a stage with calls running before and after: nothing to account.
      if (stage_.state_ != State::running || stage_.active_ <= 0) stage_.transition_locked();
    }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    const StageBase& stage_;
    std::unique_lock<tbb::spin_mutex> lock_;
  };

  /// How many more tasks could claim work right now (called locked).
  virtual std::size_t claimable_locked() = 0;
  /// The stage is done: flush, clean up, close the downstream input.
  virtual void on_finish() = 0;
  /// Items waiting, reorder buffer included (called locked).
  virtual std::size_t queued_locked() const = 0;

  /// Decides how many tasks to start (locked); pass the result to spawn() after unlocking.
  int plan_spawns_locked() {
    if (!running_ || finishing_ || active_ >= limit_) return 0;
    const std::size_t claimable = claimable_locked();
    if (claimable <= static_cast<std::size_t>(starting_)) return 0;
    const int tasks = static_cast<int>(std::min<std::size_t>(claimable - static_cast<std::size_t>(starting_),
                                                             static_cast<std::size_t>(limit_ - active_)));
    active_ += tasks;
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
    if (!input_closed_ || finishing_ || active_ != 0 || queued_locked() != 0) return false;
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

  /// Adds a body call that began at `begin` (ticks) to the busy time, and to the trace.
  void account(std::uint64_t index, std::int64_t begin);
  /// A body call failed: skipped and listed (OnError::skip) or the run fails (OnError::fail).
  void fail_or_skip(std::uint64_t index, std::exception_ptr error);

  Runtime& runtime_;
  const std::string name_;
  const StageKind kind_;
  const StageOptions options_;
  Wiring wiring_;

  // A spin lock (oneTBB's, which backs off by yielding): every section it guards is a few dozen
  // instructions, taken about twice per item and stage, where a futex mutex costs twice as much.
  mutable tbb::spin_mutex mutex_;
  // Guarded by mutex_:
  int limit_;
  int active_ = 0;    // tasks running, including those not yet claiming
  int starting_ = 0;  // tasks spawned that have not yet tried to claim
  bool running_ = false;
  bool input_closed_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  std::size_t peak_queued_ = 0;

  std::atomic<std::size_t> ready_{0};  // claimable items in the input buffer
  std::atomic<std::size_t> capacity_;
  std::atomic<bool> blocked_{false};  // parked for lack of room downstream
  bool gated_ = false;                // the body has ready(): see make_gated()
  std::shared_ptr<Doorbell> doorbell_;
  std::optional<Wake> wake_;
  std::optional<tbb::task_handle> gate_hold_;  // guarded by mutex_: held while the gate is closed

  // Added to by every item: one slot per thread (sharded_counter.hpp), summed by stats().
  ShardedCounter<std::uint64_t> items_in_;
  ShardedCounter<std::uint64_t> items_out_;
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> skipped_{0};
  ShardedCounter<std::int64_t> busy_ticks_;

 private:
  enum class State { idle, starved, blocked, running };
  State state_locked() const {
    if (!running_ || finished_ || finishing_) return State::idle;
    if (active_ > 0) return State::running;
    if (kind_ == StageKind::source) return State::blocked;
    if (ready_.load(std::memory_order_relaxed) > 0) return State::blocked;
    return input_closed_ ? State::idle : State::starved;
  }
  void transition_locked() const;

  mutable State state_ = State::idle;
  mutable std::int64_t since_ = 0;  // ticks
  mutable std::int64_t starved_ticks_ = 0;
  mutable std::int64_t blocked_ticks_ = 0;
};

}  // namespace stoke::graph::detail
