#include "stoke/graph/signal.hpp"

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

extern "C" void on_signal(int) { detail::signal_count.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

SignalStop::SignalStop() {
  if (installed.exchange(true))
    throw std::logic_error("stoke::graph::SignalStop: only one guard may be alive at a time");
  detail::signal_count.store(0);
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
  installed.store(false);
}

int SignalStop::received() noexcept { return detail::signal_count.load(); }
void SignalStop::reset() noexcept { detail::signal_count.store(0); }

}  // namespace stoke::graph
