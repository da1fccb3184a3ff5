// The typed stages: a source, and map / filter / emit / sink stages over an input buffer.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stoke/graph/concepts.hpp"
#include "stoke/graph/detail/clock.hpp"
#include "stoke/graph/detail/envelope.hpp"
#include "stoke/graph/detail/runtime.hpp"
#include "stoke/graph/detail/stage_base.hpp"
#include "stoke/graph/emitter.hpp"
#include "stoke/graph/errors.hpp"

namespace stoke::graph::detail {

template <class T>
struct Follow;

/// A stage with an input buffer of In: a FIFO of ready items, and, when the stage's input is
/// gated (ordered), a reorder buffer in front of it that releases items in seq order.
template <class In>
class InputStage : public StageBase {
 public:
  using StageBase::StageBase;

  /// Called by the upstream stage (any thread). With `carry`, the caller asks to run this stage
  /// itself next (depth-first, as oneTBB's parallel_pipeline carries a token): if a place is
  /// free, it is reserved for the caller and push returns true. The caller must then run
  /// carry->run(), which claims from the queue, unless carry->item received the item: when
  /// nothing is queued ahead of it and its order does not matter, the item skips the queue
  /// (without a lock: take_directly()). `now`: the ticks if the caller has just read them (0:
  /// read them here if needed).
  bool push(Envelope<In>&& item, Follow<In>* carry = nullptr, std::int64_t now = 0);

  /// Runs an item that push() handed to the calling task directly (the task holds `visit`).
  virtual void run_with(Envelope<In>&& item, Visit visit) = 0;

  /// A task's work: claim an item, tell the stage in front that there is room, and run it.
  void run_task() override {
    Envelope<In> item;
    if (!claim_first(item)) return;
    notify_upstream();
    run_with(std::move(item), Visit::counted);
  }

  /// Called once by the upstream stage when it has sent its last item.
  void close_input() {
    int tasks = 0;
    bool done = false;
    {
      Locked lock(*this);
      input_closed_.store(true);
      tasks = plan_spawns_locked();
      done = tasks == 0 && finish_ready_locked();
    }
    spawn(tasks);
    if (done) finish();
  }

 protected:
  /// A hole that this stage's gate released (or that passes an ungated stage): send it on or
  /// release its credits. Never calls the body.
  virtual void pass_hole(Envelope<In>&& hole) = 0;

  std::size_t claimable_locked() override {
    if (runtime_.cancelled()) return queued_locked();
    if (ready_q_.empty() || !room_or_park_locked() || !gate_locked()) return 0;
    return ready_q_.size();
  }

  std::size_t queued_locked() const override { return ready_q_.size() + gate_.size(); }

  /// The lock-free way in: an item that is not a hole goes to the pushing task without the
  /// queue when nothing is queued, the input is not ordered, the body has no gate and there is
  /// room downstream, as a carried visit or in a free slot (taken here); returns how, or nothing.
  /// No push comes before start() or after close_input(), so the stage is running. An item
  /// queued meanwhile is not overtaken for long: its pusher saw the slot taken (or, beside carried
  /// visits, started a task itself), and this task's leave() sees the item and starts a task.
  std::optional<Visit> take_directly(const Envelope<In>& item, std::int64_t now) noexcept {
    if (wiring_.gated || gated_ || item.hole() || ready_.load(std::memory_order_seq_cst) != 0 || runtime_.cancelled() ||
        !room_downstream())
      return std::nullopt;
    if (try_carry()) return Visit::carried;
    if (try_take_slot(now)) return Visit::counted;
    return std::nullopt;
  }

  /// The locked way in (a gated body's, or where the lock-free one said no): as take_directly(),
  /// parking when there is no room downstream, and asking the body's gate.
  bool can_take_directly_locked() {
    return running_ && !finishing_ && !runtime_.cancelled() && ready_q_.empty() && starting_ == 0 &&
           room_or_park_locked() && gate_locked() && try_take_slot();
  }

  /// Takes the next ready item; on cancellation moves everything queued into `discard` instead.
  bool claim_locked(Envelope<In>& item, std::vector<Envelope<In>>& discard) {
    if (runtime_.cancelled()) {
      while (!ready_q_.empty()) {
        discard.push_back(std::move(ready_q_.front()));
        ready_q_.pop_front();
      }
      gate_.drain([&](Envelope<In>& e) { discard.push_back(std::move(e)); });
      ready_.store(0, std::memory_order_seq_cst);
      return false;
    }
    if (ready_q_.empty() || !room_or_park_locked() || !gate_locked()) return false;
    item = std::move(ready_q_.front());
    ready_q_.pop_front();
    ready_.store(ready_q_.size(), std::memory_order_seq_cst);
    return true;
  }

  /// Claims the next item for this task, or gives the task's place back (and reports whether the
  /// stage is now done). Called locked.
  bool claim_or_leave_locked(Envelope<In>& item, std::vector<Envelope<In>>& discarded, bool& done, Visit visit) {
    if (active() <= limit() && claim_locked(item, discarded)) return true;
    release(visit);
    done = finish_ready_locked();
    return false;
  }

  /// A task's first claim: takes the next item, or gives the task's slot back (finishing the
  /// stage if nothing is left to do). Discards what a cancellation left queued.
  bool claim_first(Envelope<In>& item) {
    std::vector<Envelope<In>> discarded;
    bool done = false;
    bool claimed = false;
    {
      Locked lock(*this);
      --starting_;
      claimed = claim_or_leave_locked(item, discarded, done, Visit::counted);
    }
    discard(discarded);
    if (!claimed && done) finish();
    return claimed;
  }

  // Processes `item` (claimed or handed over; the task holds `visit`) with `process`, then
  // claims and processes items of this stage until one of its outputs reserves a place in the
  // next stage; then gives this stage's place back (starting a continuation task if more is
  // queued) and follows the output into the next stage on this thread, depth first. `item` is
  // the loop's: each claim refills it. `process(Envelope<In>&&)` returns a Follow<X> (where to
  // go next).
  template <class Process>
  void run_loop(Envelope<In>& item, Visit visit, Process&& process) {
    for (;;) {
      auto follow = process(std::move(item));
      // Nothing queued (the common case when items are carried from stage to stage): leave
      // without the lock.
      if (follow || ready_.load(std::memory_order_seq_cst) == 0) {
        this->leave(visit, follow.at);
        if (follow) follow.run();
        return;
      }
      std::vector<Envelope<In>> discarded;
      bool done = false;
      bool claimed = false;
      {
        Locked lock(*this);
        claimed = claim_or_leave_locked(item, discarded, done, visit);
      }
      discard(discarded);
      if (!claimed) {
        if (done) finish();
        return;
      }
      notify_upstream();
    }
  }

  void discard(std::vector<Envelope<In>>& items) noexcept {
    if (items.empty()) return;
    std::uint64_t credits = 0;
    for (auto& item : items) credits += item.credits;
    items.clear();
    runtime_.release_credits(credits);
    notify_upstream();
  }

 private:
  /// push() when the item cannot go straight to the caller: into the reorder buffer or the
  /// queue, starting tasks for what became claimable. Out of line, to keep push() small.
  [[gnu::noinline]] bool push_locked(Envelope<In>&& item, Follow<In>* carry);

  std::deque<Envelope<In>> ready_q_;
  Reorder<Envelope<In>> gate_;
};

/// Where a task goes after handing an item on with `follow`: on to `stage`, either with the item
/// itself (`item`: push() passed it over the queue) or to claim from the stage's queue.
template <class T>
struct Follow {
  using Visit = StageBase::Visit;

  InputStage<T>* stage = nullptr;
  std::optional<Envelope<T>> item{};
  Visit visit = Visit::counted;  ///< how `item` holds its place in `stage`
  /// Ticks when the body call that led here ended (0: not known), so that leaving the stage it
  /// ran in needs no second reading of the clock.
  std::int64_t at = 0;

  explicit operator bool() const noexcept { return stage != nullptr; }
  /// Continues in `stage` on this thread (the task already holds its place there).
  void run() {
    if (item)
      stage->run_with(std::move(*item), visit);
    else
      stage->run_task();
  }
};

template <class In>
bool InputStage<In>::push(Envelope<In>&& item, Follow<In>* carry, std::int64_t now) {
  if (carry != nullptr) {
    if (const std::optional<Visit> visit = take_directly(item, now)) {
      tallies_.add(&Tally::in, std::uint64_t{1});
      carry->stage = this;
      carry->item.emplace(std::move(item));
      carry->visit = *visit;
      return true;
    }
  }
  return push_locked(std::move(item), carry);
}

template <class In>
bool InputStage<In>::push_locked(Envelope<In>&& item, Follow<In>* carry) {
  std::vector<Envelope<In>> holes;
  int tasks = 0;
  {
    Locked lock(*this);
    if (!item.hole()) tallies_.add(&Tally::in, std::uint64_t{1});
    if (wiring_.gated) {
      gate_.put(item.seq, std::move(item));
      while (auto next = gate_.pop()) {
        if (next->hole())
          holes.push_back(std::move(*next));
        else
          ready_q_.push_back(std::move(*next));
      }
    } else if (item.hole()) {
      holes.push_back(std::move(item));
    } else if (carry != nullptr && can_take_directly_locked()) {
      carry->stage = this;
      carry->item.emplace(std::move(item));
      carry->visit = Visit::counted;
      return true;
    } else {
      ready_q_.push_back(std::move(item));
    }
    ready_.store(ready_q_.size(), std::memory_order_seq_cst);
    note_queue_locked();
    tasks = plan_spawns_locked();
  }
  // With a carry, the first task started is the caller's: it claims from the queue (run()).
  const bool follow = carry != nullptr && tasks > 0;
  if (follow) carry->stage = this;
  spawn(follow ? tasks - 1 : tasks);
  for (auto& hole : holes) pass_hole(std::move(hole));
  return follow;
}

/// Where a stage's outputs go.
template <class Out>
class Outlet {
 public:
  InputStage<Out>*& link() noexcept { return next_; }
  InputStage<Out>* next() const noexcept { return next_; }

  /// Hands an item to the next stage. With `follow` (once per call of a body), asks to run the
  /// next stage on this thread afterwards; returns where to go when a slot was reserved there.
  /// `now`: the ticks if the caller has just read them (0: the next stage reads the clock if
  /// it needs to).
  Follow<Out> send(Envelope<Out>&& item, bool follow = false, std::int64_t now = 0) {
    Follow<Out> next;
    next_->push(std::move(item), follow ? &next : nullptr, now);
    return next;
  }

  /// An item that produced no output: a hole if an ordered stage downstream waits for its seq,
  /// otherwise its credits are released here.
  void hole(Runtime& runtime, bool forward, std::uint64_t seq, std::uint64_t index, std::uint32_t credits) {
    if (forward)
      next_->push(Envelope<Out>{std::nullopt, seq, index, credits});
    else
      runtime.release_credits(credits);
  }

 private:
  InputStage<Out>* next_ = nullptr;
};

// ---- source ------------------------------------------------------------------------------------

template <class Out, class F>
class SourceStage final : public StageBase {
 public:
  SourceStage(Runtime& runtime, std::string name, F body)
      : StageBase(runtime, std::move(name), StageKind::source, StageOptions{}), body_(std::move(body)) {}

  InputStage<Out>*& next_link() noexcept { return out_.link(); }
  std::vector<StageBase*> outputs() const override { return {out_.next()}; }

 protected:
  std::size_t claimable_locked() override {
    if (closed_) return 0;
    if (runtime_.cancelled() || runtime_.stop_requested()) return 1;  // a task will close it
    return room_or_park_locked() && runtime_.credit_available_or_park() ? 1 : 0;
  }

  std::size_t queued_locked() const override { return 0; }

  // Produces items while nothing downstream is free to take one at once; as soon as the next
  // stage reserves a slot for this thread, the source's slot goes to a continuation task and this
  // thread carries the item on, while another may already produce the next one.
  void run_task() override {
    bool started = false;
    for (;;) {
      bool close = false;
      {
        Locked lock(*this);
        if (!started) {
          --starting_;  // this task has begun claiming
          started = true;
        }
        if (closed_ || claimable_locked() == 0) {
          give_slot();
          return;
        }
        if (runtime_.cancelled() || runtime_.stop_requested()) {
          runtime_.note_cut_short();
          close = true;
        } else {
          runtime_.take_credit();
        }
      }
      Follow<Out> follow;
      if (!close) close = !produce_one(follow);
      if (close) {
        bool done = false;
        {
          Locked lock(*this);
          give_slot();
          closed_ = true;
          input_closed_.store(true);
          done = finish_ready_locked();
        }
        if (done) finish();
        return;
      }
      if (follow) {
        // The task for the next item inherits this task's slot when it could start at once (no
        // second compare-and-swap, no clock); otherwise the slot goes back and the source parks.
        bool next = false;
        {
          Locked lock(*this);
          if (claimable_locked() > 0) {
            ++starting_;
            next = true;
          } else {
            give_slot(follow.at);
          }
        }
        if (next) spawn(1);
        follow.run();
        return;
      }
    }
  }

  void on_finish() override { out_.next()->close_input(); }

 private:
  /// Calls the body once (holding a credit). False at the end of the stream or on failure.
  bool produce_one(Follow<Out>& follow) {
    const std::uint64_t index = next_index_;
    const CallTiming call = begin_call();
    std::optional<Out> value;
    try {
      const WatchedCall watched(*this, index);
      value = std::invoke(body_);
    } catch (...) {
      runtime_.release_credits(Runtime::credit_unit);
      runtime_.fail(StageError(name_, index, std::current_exception()));
      return false;
    }
    const std::int64_t end = account(index, call);
    if (!value) {
      runtime_.release_credits(Runtime::credit_unit);
      return false;
    }
    next_index_ = index + 1;
    tallies_.add(&Tally::out, std::uint64_t{1});
    follow = out_.send(Envelope<Out>{std::move(value), index, index, Runtime::credit_unit}, true, end);
    follow.at = end;
    return true;
  }

  F body_;
  Outlet<Out> out_;
  bool closed_ = false;           // guarded by mutex_
  std::uint64_t next_index_ = 0;  // touched only by the source's (one) running task
};

// ---- map, filter, emit, sink -------------------------------------------------------------------

template <class In, class Out, class F, StageKind Kind>
class Stage final : public InputStage<In> {
  using Base = InputStage<In>;
  static constexpr bool is_sink = Kind == StageKind::sink;
  static constexpr bool is_emit = Kind == StageKind::emit;

 public:
  Stage(Runtime& runtime, std::string name, F body, StageOptions options)
      : Base(runtime, std::move(name), Kind, options), body_(std::move(body)) {
    if constexpr (Gated<F>) this->make_gated();
  }

  InputStage<Out>*& next_link() noexcept { return out_.link(); }
  std::vector<StageBase*> outputs() const override {
    if constexpr (is_sink)
      return {};
    else
      return {out_.next()};
  }

 protected:
  // Claims and processes items of this stage until one of its outputs reserves a slot in the
  // next stage; then gives this stage's slot back (starting a continuation task if more is
  // queued) and follows the output into the next stage on this thread, depth first.
  void run_with(Envelope<In>&& item, typename Base::Visit visit) override { run_from(item, visit); }

  void pass_hole(Envelope<In>&& hole) override {
    if constexpr (is_sink) {
      this->runtime_.release_credits(hole.credits);
    } else if constexpr (is_emit) {
      if (ordered_output()) {
        complete_group(hole.seq, {});
      }
      this->runtime_.release_credits(hole.credits);
    } else {
      out_.hole(this->runtime_, this->wiring_.forward_holes, hole.seq, hole.index, hole.credits);
    }
  }

  bool gate_open_locked(bool flush) override {
    if constexpr (Gated<F>) {
      if (!flush) return body_.ready(this->wake_handle());
      if constexpr (GatedFlush<F>) return body_.ready_to_flush(this->wake_handle());
    }
    return true;
  }

  void on_finish() override {
    if constexpr (is_emit) {
      if (this->runtime_.cancelled()) {
        std::lock_guard lock(gate_mutex_);
        std::uint64_t credits = 0;
        out_gate_.drain([&](std::vector<Envelope<Out>>& group) {
          for (auto& e : group) credits += e.credits;
        });
        this->runtime_.release_credits(credits);
      } else if constexpr (Flushable<F, Out>) {
        CallTarget target(*this, no_index, 0, nullptr, /*may_follow=*/false);
        Emitter<Out> emitter(target);
        try {
          body_.flush(emitter);
        } catch (...) {
          this->fail_or_skip(no_index, std::current_exception());
        }
      }
    }
    if constexpr (!is_sink) out_.next()->close_input();
  }

 private:
  bool ordered_output() const noexcept { return this->options_.ordered && this->parallel(); }

  void run_from(Envelope<In>& item, typename Base::Visit visit) {
    this->run_loop(item, visit, [this](Envelope<In>&& claimed) { return process(std::move(claimed)); });
  }

  /// Runs the body on one item and hands on what it produced; returns where to go next when a
  /// slot in the next stage was reserved for this thread.
  Follow<Out> process(Envelope<In>&& item) {
    const typename Base::CallTiming call = this->begin_call();
    std::exception_ptr error;
    if constexpr (Kind == StageKind::map || Kind == StageKind::filter) {
      std::optional<Out> result;
      try {
        const typename Base::WatchedCall watched(*this, item.index);
        if constexpr (Kind == StageKind::map)
          result.emplace(std::invoke(body_, std::move(*item.value)));
        else
          result = std::invoke(body_, std::move(*item.value));
      } catch (...) {
        error = std::current_exception();
      }
      Follow<Out> next;
      next.at = this->account(item.index, call);
      if (result) {
        this->tallies_.add(&Tally::out, std::uint64_t{1});
        next = out_.send(Envelope<Out>{std::move(result), item.seq, item.index, item.credits}, true, next.at);
        return next;
      }
      if (error)
        this->fail_or_skip(item.index, error);
      else
        this->dropped_.fetch_add(1, std::memory_order_release);
      out_.hole(this->runtime_, this->wiring_.forward_holes, item.seq, item.index, item.credits);
      return next;
    } else if constexpr (is_emit) {
      std::vector<Envelope<Out>> group;
      CallTarget target(*this, item.index, item.credits, ordered_output() ? &group : nullptr, true);
      {
        Emitter<Out> emitter(target);
        try {
          const typename Base::WatchedCall watched(*this, item.index);
          std::invoke(body_, std::move(*item.value), emitter);
        } catch (...) {
          error = std::current_exception();
        }
      }
      const std::int64_t end = this->account(item.index, call);
      if (error) this->fail_or_skip(item.index, error);
      if (!target.credit_given()) {
        if (!error) this->dropped_.fetch_add(1, std::memory_order_release);
        this->runtime_.release_credits(item.credits);
      }
      if (ordered_output()) complete_group(item.seq, std::move(group));
      Follow<Out> next = target.take_follow();
      next.at = end;
      return next;
    } else {  // sink
      try {
        const typename Base::WatchedCall watched(*this, item.index);
        std::invoke(body_, std::move(*item.value));
      } catch (...) {
        error = std::current_exception();
      }
      Follow<Out> next;
      next.at = this->account(item.index, call);
      if (error)
        this->fail_or_skip(item.index, error);
      else
        this->tallies_.add(&Tally::out, std::uint64_t{1});
      item.value.reset();  // destroy the item before its credit returns
      this->runtime_.release_credits(item.credits);
      return next;
    }
  }

  // ---- emit plumbing ----
  /// Receives one call's emissions: the first output carries the input's credits; outputs are
  /// numbered afresh on this stage's output edge. With ordered parallel output they are held in
  /// `group` and numbered when the group's turn comes.
  class CallTarget final : public EmitTarget<Out> {
   public:
    CallTarget(Stage& stage, std::uint64_t index, std::uint32_t credits, std::vector<Envelope<Out>>* group,
               bool may_follow)
        : stage_(stage), index_(index), credits_(credits), group_(group), may_follow_(may_follow) {}
    void emit(Out value) override {
      const std::uint32_t credits = given_ ? 0 : credits_;
      given_ = true;
      if (group_) {
        group_->push_back(Envelope<Out>{std::move(value), 0, index_, credits});
      } else {
        stage_.tallies_.add(&Tally::out, std::uint64_t{1});
        Follow<Out> next = stage_.out_.send(
            Envelope<Out>{std::move(value), stage_.out_seq_.fetch_add(1), index_, credits}, may_follow_ && !follow_);
        if (next) follow_ = std::move(next);
      }
    }
    bool credit_given() const noexcept { return given_; }
    /// Where to go next, if a slot in the next stage was reserved for this thread by one of the
    /// emissions.
    Follow<Out> take_follow() noexcept { return std::move(follow_); }

   private:
    Stage& stage_;
    std::uint64_t index_;
    std::uint32_t credits_;
    std::vector<Envelope<Out>>* group_;
    bool may_follow_;
    bool given_ = false;
    Follow<Out> follow_{};
  };

  /// Ordered parallel emit: releases completed groups in input order, numbering their outputs.
  void complete_group(std::uint64_t seq, std::vector<Envelope<Out>>&& group) {
    std::lock_guard lock(gate_mutex_);
    out_gate_.put(seq, std::move(group));
    while (auto ready = out_gate_.pop()) {
      for (auto& e : *ready) {
        e.seq = out_seq_.fetch_add(1);
        this->tallies_.add(&Tally::out, std::uint64_t{1});
        out_.send(std::move(e));  // under gate_mutex_, so the next stage receives them in order
      }
    }
  }

  F body_;
  [[no_unique_address]] std::conditional_t<is_sink, Nothing, Outlet<Out>> out_;
  std::atomic<std::uint64_t> out_seq_{0};
  std::mutex gate_mutex_;
  Reorder<std::vector<Envelope<Out>>> out_gate_;
};

}  // namespace stoke::graph::detail
