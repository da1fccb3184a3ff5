// Emitter: how an emit stage hands any number of outputs downstream.
#pragma once

#include <cstddef>
#include <utility>

namespace stoke::graph {

namespace detail {
template <class T>
class EmitTarget {
 public:
  virtual void emit(T value) = 0;

 protected:
  ~EmitTarget() = default;
};
}  // namespace detail

/// Passed to an emit stage's body (`void(In, Emitter<Out>&)`) and to its optional
/// `flush(Emitter<Out>&)`. Valid only during that call; not thread-safe (each call gets its own).
template <class T>
class Emitter {
 public:
  explicit Emitter(detail::EmitTarget<T>& target) noexcept : target_(&target) {}
  Emitter(const Emitter&) = delete;
  Emitter& operator=(const Emitter&) = delete;

  void emit(T value) {
    target_->emit(std::move(value));
    ++count_;
  }
  void operator()(T value) { emit(std::move(value)); }
  /// Outputs emitted so far in this call.
  std::size_t count() const noexcept { return count_; }

 private:
  detail::EmitTarget<T>* target_;
  std::size_t count_ = 0;
};

}  // namespace stoke::graph
