#include "watchdog.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <string>

#include "stoke/graph/errors.hpp"

namespace stoke::graph::detail {

namespace {

double seconds(std::chrono::nanoseconds t) { return std::chrono::duration<double>(t).count(); }

}  // namespace

Watchdog::Watchdog(Runtime& runtime, std::vector<StageBase*> stages)
    : runtime_(runtime),
      options_(runtime.options().stall),
      stages_(std::move(stages)),
      seen_(stages_.size(), std::vector<Seen>(tally_slots - 1)) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

std::vector<Stall> Watchdog::finish() {
  stop();
  if (thread_.joinable()) thread_.join();
  return stalls_;
}

void Watchdog::loop() {
  // A quarter of the limit between looks: a stall is found between limit and 1.25 x limit.
  const auto interval = std::max<std::chrono::nanoseconds>(options_.limit / 4, std::chrono::milliseconds(1));
  std::unique_lock lock(mutex_);
  for (;;) {
    if (wake_.wait_for(lock, interval, [this] { return stopping_; })) break;
    lock.unlock();
    look(Clock::now());
    lock.lock();
  }
  // The run's tasks are done: a last look sees the stalled calls returned.
  lock.unlock();
  look(Clock::now());
}

void Watchdog::look(Clock::time_point now) {
  for (std::size_t stage = 0; stage < stages_.size(); ++stage) {
    stages_[stage]->calls_in_progress(words_);
    for (std::size_t slot = 0; slot < words_.size(); ++slot) {
      Seen& seen = seen_[stage][slot];
      const std::uint64_t word = words_[slot];
      if (word == seen.word) {
        if (word == 0) continue;
        if (seen.stall == none) {
          if (now - seen.since >= options_.limit) report(stage, seen, now);
        } else {
          std::lock_guard lock(mutex_);
          stalls_[seen.stall].running = now - seen.since;
        }
        continue;
      }
      if (seen.stall != none) {  // the stalled call returned (by now)
        std::lock_guard lock(mutex_);
        stalls_[seen.stall].running = now - seen.since;
        stalls_[seen.stall].returned = true;
      }
      seen = Seen{.word = word, .since = now};
    }
  }
  // OnStall::fail cancelled the run; a call that does not return within one more limit never
  // lets run() return: end the process, saying why.
  if (failed_at_ && now - *failed_at_ >= (options_.grace.count() > 0 ? options_.grace : options_.limit)) {
    std::lock_guard lock(mutex_);
    const bool any_left = std::any_of(seen_.begin(), seen_.end(), [](const std::vector<Seen>& stage) {
      return std::any_of(stage.begin(), stage.end(), [](const Seen& s) { return s.stall != none && s.word != 0; });
    });
    if (any_left) {
      std::string text =
          "stoke: a stalled call did not return after the run was cancelled (OnStall::fail); "
          "ending the process with status " +
          std::to_string(stall_exit_status) + ":\n";
      for (const Stall& stall : stalls_)
        if (!stall.returned) text += "  " + describe(stall) + "\n";
      std::fputs(text.c_str(), stderr);
      std::fflush(stderr);
      std::_Exit(stall_exit_status);
    }
  }
}

void Watchdog::report(std::size_t stage, Seen& seen, Clock::time_point now) {
  Stall stall;
  stall.stage = stages_[stage]->name();
  stall.index = StageBase::called_index(seen.word);
  stall.running = now - seen.since;
  if (options_.item_name) {
    try {
      stall.item = options_.item_name(stall.index);
    } catch (const std::exception& e) {
      stall.item = std::string("(its name: ") + e.what() + ")";
    }
  }
  {
    std::lock_guard lock(mutex_);
    seen.stall = stalls_.size();
    stalls_.push_back(stall);
  }
  const double limit = seconds(options_.limit);
  if (options_.on_stall) {
    try {
      options_.on_stall(stall);
    } catch (...) {  // a logger's failure must not end the watchdog
    }
  } else {
    char tail[96];
    std::snprintf(tail, sizeof tail, " (stall limit %.3g s)%s\n", limit,
                  options_.policy == OnStall::fail ? "; failing the run" : "");
    std::cerr << "stoke: " + describe(stall) + tail << std::flush;
  }
  if (options_.policy == OnStall::fail) {
    runtime_.fail(StageError(
        stall.stage, stall.index,
        std::make_exception_ptr(StallError(stall.stage, stall.index, stall.item, seconds(stall.running), limit))));
    if (!failed_at_) failed_at_ = now;
  }
}

}  // namespace stoke::graph::detail
