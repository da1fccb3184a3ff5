#include "stoke/graph/signal.hpp"

#include <unistd.h>

#include <csignal>
#include <stdexcept>

#include "stoke/graph/detail/runtime.hpp"

namespace stoke::graph {

namespace detail {
std::atomic<int> signal_count{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free counter");
}  // namespace detail

namespace {
struct sigaction previous_int;
struct sigaction previous_term;
std::atomic<bool> installed{false};
std::atomic<int> exit_at_count{0};  // 0: never
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads it");

extern "C" void on_signal(int signal) {
  const int count = detail::signal_count.fetch_add(1, std::memory_order_relaxed) + 1;
  const int exit_at = exit_at_count.load(std::memory_order_relaxed);
  if (exit_at > 0 && count >= exit_at) {
    // Only async-signal-safe calls here: write(2) and _exit(2).
    constexpr char message[] = "\nstopped at once (signal received again)\n";
    [[maybe_unused]] const auto written = ::write(2, message, sizeof message - 1);
    ::_exit(128 + signal);
  }
}
}  // namespace

SignalStop::SignalStop() : SignalStop(0) {}

SignalStop::SignalStop(int exit_at) {
  if (installed.exchange(true))
    throw std::logic_error("stoke::graph::SignalStop: only one guard may be alive at a time");
  detail::signal_count.store(0);
  exit_at_count.store(exit_at);
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &previous_int);
  sigaction(SIGTERM, &action, &previous_term);
}

SignalStop::~SignalStop() {
  sigaction(SIGINT, &previous_int, nullptr);
  sigaction(SIGTERM, &previous_term, nullptr);
  exit_at_count.store(0);
  installed.store(false);
}

int SignalStop::received() noexcept { return detail::signal_count.load(); }
void SignalStop::reset() noexcept { detail::signal_count.store(0); }

}  // namespace stoke::graph
