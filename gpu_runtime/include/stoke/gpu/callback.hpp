// Callback: a move-only `void()` (what std::move_only_function is in C++23), so that work queued
// for later can own move-only things: a Batch, a Completion.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace stoke::gpu {

class Callback {
 public:
  Callback() noexcept = default;
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, Callback> && std::is_invocable_r_v<void, F&>)
  Callback(F f)  // NOLINT: converts from any callable, like std::function
      : impl_(std::make_unique<Impl<F>>(std::move(f))) {}

  explicit operator bool() const noexcept { return impl_ != nullptr; }
  /// Calls it. Precondition: not empty.
  void operator()() { impl_->call(); }

 private:
  struct Base {
    virtual ~Base() = default;
    virtual void call() = 0;
  };
  template <class F>
  struct Impl final : Base {
    explicit Impl(F f) : fn(std::move(f)) {}
    void call() override { fn(); }
    F fn;
  };
  std::unique_ptr<Base> impl_;
};

}  // namespace stoke::gpu
