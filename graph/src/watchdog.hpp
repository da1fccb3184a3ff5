// Watchdog: the thread that finds body calls running past PipelineOptions::stall's limit (private
// header). Every limit / 4 it reads the call each thread is in, per stage (Tally::calling, set by
// StageBase::WatchedCall); a call seen in the same place for `limit` is reported once -- to
// StallOptions::on_stall (or stderr), to the report, and under OnStall::fail as the run's failure.
// Started once the stages run, stopped (joined) before run() returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "stoke/graph/detail/runtime.hpp"
#include "stoke/graph/detail/stage_base.hpp"
#include "stoke/graph/stats.hpp"

namespace stoke::graph::detail {

class Watchdog {
 public:
  /// Starts the thread; `stages` outlive it.
  Watchdog(Runtime& runtime, std::vector<StageBase*> stages);
  /// Stops and joins the thread.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Stops and joins the thread; returns the stalls found, in order.
  std::vector<Stall> finish();

 private:
  using Clock = std::chrono::steady_clock;
  /// What one thread was last seen doing in one stage.
  struct Seen {
    std::uint64_t word = 0;  // Tally::calling
    Clock::time_point since{};
    std::size_t stall = none;  // its entry in stalls_, once reported
  };
  static constexpr std::size_t none = ~std::size_t{0};

  void stop() noexcept;
  void loop();
  void look(Clock::time_point now);
  void report(std::size_t stage, Seen& seen, Clock::time_point now);

  Runtime& runtime_;
  const StallOptions options_;
  std::vector<StageBase*> stages_;
  std::vector<std::vector<Seen>> seen_;  // [stage][thread slot]
  std::vector<std::uint64_t> words_;     // scratch for one stage's calls
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<Stall> stalls_;  // guarded by mutex_
  // OnStall::fail: when the run was failed, to end the process if the call never returns.
  std::optional<Clock::time_point> failed_at_;
  std::thread thread_;
};

}  // namespace stoke::graph::detail
