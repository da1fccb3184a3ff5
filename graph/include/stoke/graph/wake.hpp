// Wake: how a gated stage body asks to be looked at again. A body that needs something besides an
// input before it can run (a free batch slot, say) has `bool ready(const Wake&)`: the stage starts
// a call only while ready() is true, and otherwise parks -- no thread waits -- until whoever frees
// the resource rings the Wake it was given.
//
//   struct Batcher {
//     stoke::nodes::BatchPool pool;
//     bool ready(const stoke::graph::Wake& wake) { return pool.ready(wake); }  // keeps `wake`
//     void operator()(Image image, stoke::graph::Emitter<Batch>& out) { ... pool.acquire() ... }
//   };
#pragma once

#include <atomic>
#include <memory>

namespace stoke::graph {

namespace detail {
class StageBase;

/// What a Wake rings: its stage, until the stage is destroyed. Lock-free, so that a ring may come
/// from anywhere, the stage's own calls included.
struct Doorbell {
  std::atomic<StageBase*> stage{nullptr};
  std::atomic<int> ringing{0};

  /// Called by the stage's destructor: later rings do nothing, and a ring in progress has ended
  /// when it returns.
  void disconnect() noexcept;
};
}  // namespace detail

/// A handle on one stage's doorbell. Ringing (calling it) makes the stage look again at whether it
/// can start a call; a ring that finds nothing to do costs a lock. Any thread may ring, any number
/// of times; ringing a stage whose pipeline has ended or been destroyed does nothing. Copies ring
/// the same stage and compare equal, so a resource can keep each waiting stage once.
class Wake {
 public:
  explicit Wake(std::shared_ptr<detail::Doorbell> bell) noexcept : bell_(std::move(bell)) {}

  void operator()() const noexcept;
  bool operator==(const Wake& other) const noexcept { return bell_ == other.bell_; }

 private:
  std::shared_ptr<detail::Doorbell> bell_;
};

}  // namespace stoke::graph
