// SignalStop: route SIGINT/SIGTERM to pipelines built with PipelineOptions::stop_on_signal.
#pragma once

namespace stoke::graph {

/// While alive, SIGINT and SIGTERM no longer kill the process; instead every running pipeline
/// with `stop_on_signal` stops (first signal: drain) or cancels (second signal). The previous
/// handlers are restored on destruction. One guard at a time; construct it on the main thread.
class SignalStop {
 public:
  SignalStop();
  ~SignalStop();
  SignalStop(const SignalStop&) = delete;
  SignalStop& operator=(const SignalStop&) = delete;

  /// Signals received since this guard was installed.
  static int received() noexcept;
  /// Forget received signals (e.g. between two runs under the same guard).
  static void reset() noexcept;
};

}  // namespace stoke::graph
