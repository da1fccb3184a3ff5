// Scheduler: the thread that runs an Autotuner beside a running Pipeline (private header).
// Every AutotuneOptions::interval it reads the stage stats, asks the tuner, applies its moves
// (set_concurrency, set_max_in_flight), records them for the report and the trace, and hands
// each to AutotuneOptions::on_decision. It is started once the stages run and stopped (joined)
// before run() returns.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "stoke/graph/autotune.hpp"
#include "stoke/graph/detail/runtime.hpp"

namespace stoke::graph {
class Pipeline;
}

namespace stoke::graph::detail {

class Scheduler {
 public:
  /// Starts the thread. `options` as given by the user; defaults (budgets) are filled in here.
  Scheduler(Pipeline& pipeline, Runtime& runtime, AutotuneOptions options);
  /// Stops and joins the thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Every move made, in order. Call after the thread was stopped (after destruction's stop()).
  std::vector<Decision> decisions() const;
  void stop() noexcept;

 private:
  void loop();
  void apply(const Decision& d);

  Pipeline& pipeline_;
  Runtime& runtime_;
  Autotuner tuner_;
  std::function<void(const Decision&)> on_decision_;
  std::chrono::milliseconds interval_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace stoke::graph::detail
