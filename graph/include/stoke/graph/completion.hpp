// Completion: how an async stage's body finishes an item later, from any thread.
//
//   pipe.source(...)
//       .async<Result>("gpu", [&](Job job, stoke::graph::Completion<Result> done) {
//         gpu.enqueue(job, [done = std::move(done)](Result r) mutable { done(std::move(r)); });
//       }, {.concurrency = stoke::graph::parallel(4)})   // at most 4 jobs outstanding
//       .sink(...);
#pragma once

#include <oneapi/tbb/task_group.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

namespace stoke::graph {

namespace detail {

template <class In, class Out, class F>
class AsyncStage;

/// One outstanding operation of an async stage, shared by the stage and the Completion.
struct AsyncOp {
  std::uint64_t seq = 0;
  std::uint64_t index = 0;
  std::uint32_t credits = 0;
  std::int64_t begin = 0;  // ticks
  std::thread::id starter;
  std::atomic<bool> in_body{false};
  /// Set when the Completion was destroyed unresolved while the body was unwinding from an
  /// exception on the starting thread: the stage then resolves it with that exception.
  std::atomic<bool> deferred{false};
  /// Keeps the run from ending while the operation is outstanding (Runtime::hold()).
  tbb::task_handle hold{};
};

/// Where a Completion delivers its result (the async stage). Thread-safe.
template <class Out>
class AsyncTarget {
 public:
  /// Exactly one call per operation: an output, no output (both null), or an error.
  virtual void resolve(std::shared_ptr<AsyncOp> op, std::optional<Out> value, std::exception_ptr error) noexcept = 0;

 protected:
  ~AsyncTarget() = default;
};

}  // namespace detail

/// Passed by value to an async stage's body (`void(In, Completion<Out>)`). The body starts the
/// work (enqueues it on a GPU stream, an I/O ring, another thread) and returns at once; whoever
/// finishes the work resolves the Completion exactly once, from any thread:
///   done(out)      hands `out` downstream;
///   done.drop()    the item produces no output (like a filter returning nullopt);
///   done.fail(e)   the item failed: the stage's OnError policy applies.
/// Until it is resolved, the item counts against the stage's concurrency and the pipeline does not
/// finish. A Completion destroyed unresolved fails its item ("abandoned"); if that happens while
/// the body itself throws, the item fails with the body's exception instead. Move-only.
template <class Out>
class Completion {
 public:
  Completion(Completion&& other) noexcept
      : target_(other.target_), op_(std::move(other.op_)), uncaught_(other.uncaught_) {}
  Completion& operator=(Completion&& other) noexcept {
    if (this != &other) {
      abandon();
      target_ = other.target_;
      op_ = std::move(other.op_);
      uncaught_ = other.uncaught_;
    }
    return *this;
  }
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;
  ~Completion() { abandon(); }

  /// Resolves with an output. Throws std::logic_error when already resolved (or moved from).
  void operator()(Out value) { resolve(std::optional<Out>(std::move(value)), nullptr); }
  /// Resolves with no output.
  void drop() { resolve(std::nullopt, nullptr); }
  /// Resolves with an error (a null `error` becomes a std::runtime_error saying so).
  void fail(std::exception_ptr error) {
    if (!error) error = std::make_exception_ptr(std::runtime_error("async operation failed (no error given)"));
    resolve(std::nullopt, std::move(error));
  }

  /// Not yet resolved.
  bool pending() const noexcept { return op_ != nullptr; }
  /// The item's position in the source stream (for messages).
  std::uint64_t index() const noexcept { return op_ ? op_->index : 0; }

 private:
  template <class, class, class>
  friend class detail::AsyncStage;
  Completion(detail::AsyncTarget<Out>& target, std::shared_ptr<detail::AsyncOp> op) noexcept
      : target_(&target), op_(std::move(op)), uncaught_(std::uncaught_exceptions()) {}

  void resolve(std::optional<Out> value, std::exception_ptr error) {
    if (!op_) throw std::logic_error("stoke::graph: Completion resolved twice (or after being moved from)");
    target_->resolve(std::move(op_), std::move(value), std::move(error));
  }

  void abandon() noexcept {
    if (!op_) return;
    if (std::uncaught_exceptions() > uncaught_ && op_->in_body.load() && op_->starter == std::this_thread::get_id()) {
      op_->deferred.store(true);  // the stage resolves it with the body's exception
      op_.reset();
      return;
    }
    target_->resolve(std::move(op_), std::nullopt,
                     std::make_exception_ptr(std::logic_error(
                         "async operation abandoned: its Completion was destroyed without being resolved")));
  }

  detail::AsyncTarget<Out>* target_ = nullptr;
  std::shared_ptr<detail::AsyncOp> op_;
  int uncaught_ = 0;
};

}  // namespace stoke::graph
