// AsyncStage: a stage whose body starts work that finishes later, elsewhere (see completion.hpp).
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "stoke/graph/completion.hpp"
#include "stoke/graph/detail/clock.hpp"
#include "stoke/graph/detail/stages.hpp"

namespace stoke::graph::detail {

/// Each claimed item becomes an operation that holds one of the stage's concurrency slots from
/// the body's start until its Completion is resolved, so `concurrency` bounds the operations
/// outstanding, and the stage counts as running (not starved) while any is. The body runs on a
/// task and returns at once; no thread waits for the operation. A resolution (on any thread)
/// hands the output on without running the next stage's body on that thread (it only spawns
/// tasks), frees the slot and starts the next item. The graph's wait counts every outstanding
/// operation (tbb::flow::graph::reserve_wait), so a run ends only when all are resolved.
/// "busy" is the time operations were outstanding, summed over concurrent ones.
template <class In, class Out, class F>
class AsyncStage final : public InputStage<In>, private AsyncTarget<Out> {
  using Base = InputStage<In>;

 public:
  AsyncStage(Runtime& runtime, std::string name, F body, StageOptions options)
      : Base(runtime, std::move(name), StageKind::async, options), body_(std::move(body)) {
    this->carriable_ = false;
  }

  InputStage<Out>*& next_link() noexcept { return out_.link(); }
  std::vector<StageBase*> outputs() const override { return {out_.next()}; }

 protected:
  // Always a counted slot (the constructor forbids carried visits): the slot stays taken until
  // the operation is resolved, after the task has left.
  void run_with(Envelope<In>&& item, typename Base::Visit /*counted*/) override { start(std::move(item)); }

  void pass_hole(Envelope<In>&& hole) override {
    out_.hole(this->runtime_, this->wiring_.forward_holes, hole.seq, hole.index, hole.credits);
  }

  void on_finish() override { out_.next()->close_input(); }

 private:
  void start(Envelope<In>&& item) {
    auto op = std::make_shared<AsyncOp>();
    op->seq = item.seq;
    op->index = item.index;
    op->credits = item.credits;
    op->starter = std::this_thread::get_id();
    op->in_body.store(true);
    op->hold = this->runtime_.hold();  // released in resolve(): the run waits for the operation
    op->begin = ticks();
    try {
      const typename Base::WatchedCall watched(*this, op->index);
      std::invoke(body_, std::move(*item.value), Completion<Out>(*this, op));
      op->in_body.store(false);
    } catch (...) {
      op->in_body.store(false);
      if (op->deferred.load()) {
        resolve(op, std::nullopt, std::current_exception());
      } else {
        // The Completion was handed off before the body threw: its holder still resolves the item.
        this->fail_or_skip(op->index, std::current_exception());
      }
    }
  }

  void resolve(std::shared_ptr<AsyncOp> op, std::optional<Out> value, std::exception_ptr error) noexcept override {
    this->account(op->index, {op->begin, 1});  // every operation timed: they are long
    if (error) this->fail_or_skip(op->index, error);
    if (value) {
      this->tallies_.add(&Tally::out, std::uint64_t{1});
      out_.send(Envelope<Out>{std::move(value), op->seq, op->index, op->credits});
    } else {
      if (!error) this->dropped_.fetch_add(1, std::memory_order_release);
      out_.hole(this->runtime_, this->wiring_.forward_holes, op->seq, op->index, op->credits);
    }
    this->leave(Base::Visit::counted);  // its slot, and a task for what waits for one
    op->hold = {};                      // the run may end now
  }

  F body_;
  Outlet<Out> out_;
};

}  // namespace stoke::graph::detail
