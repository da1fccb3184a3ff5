#include "scheduler.hpp"

#include <exception>

#include "stoke/graph/detail/clock.hpp"
#include "stoke/graph/pipeline.hpp"

namespace stoke::graph::detail {

namespace {

AutotuneOptions with_defaults(AutotuneOptions options, const PipelineOptions& pipeline) {
  if (options.cpu_budget <= 0)
    options.cpu_budget = pipeline.threads > 0 ? std::min(pipeline.threads, usable_cores()) : usable_cores();
  if (options.memory_budget == 0 && options.item_bytes > 0) options.memory_budget = available_memory() / 4;
  if (options.interval <= std::chrono::milliseconds(0)) options.interval = std::chrono::milliseconds(200);
  options.on_decision = nullptr;  // the scheduler calls it, after applying the move
  return options;
}

}  // namespace

Scheduler::Scheduler(Pipeline& pipeline, Runtime& runtime, AutotuneOptions options)
    : pipeline_(pipeline),
      runtime_(runtime),
      tuner_(with_defaults(options, runtime.options())),
      on_decision_(std::move(options.on_decision)),
      interval_(tuner_.options().interval) {
  // The settings the run starts from, so that the trace's counters begin at the right values.
  for (const StageStats& s : pipeline_.stats())
    if (s.max_concurrency > s.min_concurrency)
      runtime_.record_setting(s.name, static_cast<std::size_t>(s.concurrency), 0);
  runtime_.record_setting("", pipeline_.max_in_flight(), 0);
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  stop();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

std::vector<Decision> Scheduler::decisions() const {
  std::lock_guard lock(mutex_);
  return tuner_.history();
}

void Scheduler::apply(const Decision& d) {
  switch (d.kind) {
    case DecisionKind::grow:
    case DecisionKind::shrink:
      pipeline_.set_concurrency(d.stage, static_cast<int>(d.to));
      break;
    case DecisionKind::grow_in_flight:
    case DecisionKind::shrink_in_flight:
      pipeline_.set_max_in_flight(d.to);
      break;
  }
  runtime_.record_decision(d);
  if (on_decision_) {
    try {
      on_decision_(d);
    } catch (...) {
      on_decision_ = nullptr;  // a logger that throws is not called again; the run goes on
    }
  }
}

void Scheduler::loop() {
  const auto since_start = [this] { return std::chrono::nanoseconds(ticks_to_ns(ticks() - runtime_.started_ticks())); };
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (wake_.wait_for(lock, interval_, [this] { return stopping_; })) break;
    const std::vector<StageStats> stats = pipeline_.stats();
    const std::vector<Decision> moves =
        tuner_.observe(stats, pipeline_.max_in_flight(), since_start(), pipeline_.in_flight());
    lock.unlock();  // decisions() may be read meanwhile; the tuner is touched only here
    for (const Decision& d : moves) apply(d);
    lock.lock();
  }
}

}  // namespace stoke::graph::detail
