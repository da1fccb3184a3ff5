#include "stoke/bench/timing.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace stoke::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

TimedRun run_timed(graph::Pipeline& pipe, double seconds, std::chrono::milliseconds period, const Tick& tick) {
  TimedRun run;
  std::mutex mutex;
  std::condition_variable cv;
  bool ended = false;
  const bool limited = seconds > 0;
  const bool ticking = tick && period > std::chrono::milliseconds::zero();
  run.start = Clock::now();
  const auto end = run.start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::thread side;
  if (limited || ticking) {
    side = std::thread([&] {
      std::unique_lock lock(mutex);
      for (int k = 1;; ++k) {
        auto next = ticking ? run.start + k * period : end;
        if (limited) next = std::min(next, end);
        if (cv.wait_until(lock, next, [&] { return ended; })) return;  // the run ended first
        if (tick) tick(seconds_between(run.start, Clock::now()));
        if (limited && next == end) {
          pipe.stop();
          return;
        }
      }
    });
  }
  struct Joiner {  // also when run() throws
    std::mutex& mutex;
    std::condition_variable& cv;
    bool& ended;
    std::thread& thread;
    ~Joiner() {
      {
        const std::lock_guard lock(mutex);
        ended = true;
      }
      cv.notify_all();
      if (thread.joinable()) thread.join();
    }
  } joiner{mutex, cv, ended, side};
  run.report = pipe.run();
  run.seconds = seconds_between(run.start, Clock::now());
  return run;
}

}  // namespace stoke::bench
