// SignalStop: route SIGINT/SIGTERM to pipelines built with PipelineOptions::stop_on_signal.
#pragma once

namespace stoke::graph {

/// While alive, SIGINT and SIGTERM no longer kill the process; instead every running pipeline
/// with `stop_on_signal` stops (first signal: drain) or cancels (second signal). The previous
/// handlers are restored on destruction. One guard at a time; construct it on the main thread.
class SignalStop {
 public:
  SignalStop();
  /// As above; the `exit_at`-th signal (e.g. 2: the second Ctrl-C) ends the process at once with
  /// _exit(128 + the signal's number), for a user who will not wait for the drain. 0: never.
  explicit SignalStop(int exit_at);
  ~SignalStop();
  SignalStop(const SignalStop&) = delete;
  SignalStop& operator=(const SignalStop&) = delete;

  /// Signals received since this guard was installed.
  static int received() noexcept;
  /// Forget received signals (e.g. between two runs under the same guard).
  static void reset() noexcept;
};

}  // namespace stoke::graph
