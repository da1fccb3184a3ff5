#include "stoke/graph/autotune.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <thread>
#include <utility>

namespace stoke::graph {

namespace {

double seconds(std::chrono::nanoseconds d) { return std::chrono::duration<double>(d).count(); }

std::string percent(double share) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", 100.0 * share);
  return text;
}

std::string key_of(DecisionKind kind, const std::string& stage) { return std::string(to_string(kind)) + ":" + stage; }

DecisionKind inverse(DecisionKind kind) {
  switch (kind) {
    case DecisionKind::grow:
      return DecisionKind::shrink;
    case DecisionKind::shrink:
      return DecisionKind::grow;
    case DecisionKind::grow_in_flight:
      return DecisionKind::shrink_in_flight;
    case DecisionKind::shrink_in_flight:
      return DecisionKind::grow_in_flight;
  }
  return kind;
}

}  // namespace

const char* to_string(DecisionKind kind) noexcept {
  switch (kind) {
    case DecisionKind::grow:
      return "grow";
    case DecisionKind::shrink:
      return "shrink";
    case DecisionKind::grow_in_flight:
      return "grow-in-flight";
    case DecisionKind::shrink_in_flight:
      return "shrink-in-flight";
  }
  return "unknown";
}

Autotuner::Autotuner(AutotuneOptions options) : options_(std::move(options)) {
  if (options_.cpu_budget <= 0) options_.cpu_budget = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options_.smoothing = std::clamp(options_.smoothing, 0.01, 1.0);
  options_.patience = std::max(options_.patience, 1);
}

std::size_t Autotuner::in_flight_ceiling() const noexcept {
  if (options_.memory_budget == 0 || options_.item_bytes == 0) return std::numeric_limits<std::size_t>::max();
  return std::max<std::size_t>(options_.memory_budget / options_.item_bytes, 1);
}

void Autotuner::measure(const std::vector<StageStats>& stats, std::chrono::nanoseconds now) {
  const double dt = seconds(now - previous_at_);
  const bool fresh = loads_.size() != stats.size();
  if (fresh) loads_.assign(stats.size(), StageLoad{});
  const double a = fresh ? 1.0 : options_.smoothing;
  for (std::size_t i = 0; i < stats.size(); ++i) {
    const StageStats& s = stats[i];
    const StageStats& p = previous_[i];
    StageLoad& load = loads_[i];
    const double busy = seconds(s.busy - p.busy) / (dt * std::max(s.concurrency, 1));
    const double starved = seconds(s.starved - p.starved) / dt;
    const double blocked = seconds(s.blocked - p.blocked) / dt;
    const double rate = static_cast<double>(s.items_out - p.items_out) / dt;
    load.name = s.name;
    load.utilization = a * std::clamp(busy, 0.0, 1.0) + (1 - a) * load.utilization;
    load.starved = a * std::clamp(starved, 0.0, 1.0) + (1 - a) * load.starved;
    load.blocked = a * std::clamp(blocked, 0.0, 1.0) + (1 - a) * load.blocked;
    load.rate = a * rate + (1 - a) * load.rate;
    load.concurrency = s.concurrency;
    load.min_concurrency = s.min_concurrency;
    load.max_concurrency = s.max_concurrency;
  }
}

int Autotuner::threads_in_use() const {
  int threads = 0;
  for (const StageLoad& load : loads_)
    if (load.max_concurrency > 1) threads += load.concurrency;
  return threads;
}

double Autotuner::sink_rate() const {
  for (const StageLoad& load : loads_)
    if (load.name == options_.target) return load.rate;
  return loads_.empty() ? 0.0 : loads_.back().rate;
}

bool Autotuner::is_tabu(const Decision& d) const {
  const auto it = tabu_until_.find(key_of(d.kind, d.stage));
  return it != tabu_until_.end() && interval_ < it->second;
}

Decision Autotuner::make(DecisionKind kind, const std::string& stage, std::size_t from, std::size_t to,
                         std::string why) const {
  return Decision{kind, stage, from, to, std::move(why), now_, false};
}

std::optional<Decision> Autotuner::propose(std::size_t max_in_flight) const {
  if (loads_.empty()) return std::nullopt;
  std::size_t target = loads_.size() - 1;
  for (std::size_t i = 0; i < loads_.size(); ++i)
    if (loads_[i].name == options_.target) target = i;
  const StageLoad& sink = loads_[target];
  const auto accept = [&](const Decision& d) -> std::optional<Decision> {
    if (is_tabu(d)) return std::nullopt;
    return d;
  };

  // Stages that could give a thread back, least used first.
  std::vector<std::size_t> donors;
  for (std::size_t i = 0; i < loads_.size(); ++i)
    if (i != target && loads_[i].max_concurrency > 1 && loads_[i].concurrency > loads_[i].min_concurrency &&
        loads_[i].utilization < options_.idle)
      donors.push_back(i);
  std::sort(donors.begin(), donors.end(),
            [&](std::size_t x, std::size_t y) { return loads_[x].utilization < loads_[y].utilization; });

  if (sink.utilization >= options_.saturated) {
    // The target is saturated: extra threads elsewhere only spin. Give one back.
    for (const std::size_t i : donors) {
      const StageLoad& d = loads_[i];
      if (auto decision = accept(make(DecisionKind::shrink, d.name, static_cast<std::size_t>(d.concurrency),
                                       static_cast<std::size_t>(d.concurrency - 1),
                                       sink.name + " is saturated (busy " + percent(sink.utilization) + "); " + d.name +
                                           " uses " + percent(d.utilization) + " of its " +
                                           std::to_string(d.concurrency) + " calls: one goes back")))
        return decision;
    }
    return std::nullopt;
  }
  if (sink.starved < 1.0 - options_.saturated) return std::nullopt;  // neither saturated nor starving

  // The target starves. The bottleneck is the busiest stage in front of it.
  std::vector<std::size_t> upstream;
  for (std::size_t i = 0; i < target; ++i) upstream.push_back(i);
  std::sort(upstream.begin(), upstream.end(),
            [&](std::size_t x, std::size_t y) { return loads_[x].utilization > loads_[y].utilization; });
  for (const std::size_t i : upstream) {
    const StageLoad& b = loads_[i];
    if (b.utilization < options_.saturated) break;  // the rest are less busy still
    if (b.concurrency >= b.max_concurrency) continue;  // serial, or at its maximum
    const std::string why_grow = sink.name + " starves " + percent(sink.starved) + " of the time; " + b.name +
                                 " is busy " + percent(b.utilization) + " of its " + std::to_string(b.concurrency) +
                                 " calls";
    if (threads_in_use() < options_.cpu_budget || b.max_concurrency <= 1) {
      if (auto decision = accept(make(DecisionKind::grow, b.name, static_cast<std::size_t>(b.concurrency),
                                       static_cast<std::size_t>(b.concurrency + 1), why_grow + ": one more")))
        return decision;
      continue;
    }
    // At the CPU budget: move a thread from the least used stage.
    for (const std::size_t j : donors) {
      if (j == i) continue;
      const StageLoad& d = loads_[j];
      if (auto decision = accept(make(DecisionKind::shrink, d.name, static_cast<std::size_t>(d.concurrency),
                                       static_cast<std::size_t>(d.concurrency - 1),
                                       why_grow + ", at the CPU budget of " + std::to_string(options_.cpu_budget) +
                                           " threads; " + d.name + " (busy " + percent(d.utilization) +
                                           ") gives one up for it")))
        return decision;
    }
    return std::nullopt;  // nothing to take from: the budget is the limit
  }

  // No stage in front is saturated, yet the target starves: items are held back by the in-flight
  // limit (or the queues), not by work. Let more in flight.
  bool any_saturated = false;
  for (const std::size_t i : upstream) any_saturated = any_saturated || loads_[i].utilization >= options_.saturated;
  if (any_saturated) return std::nullopt;
  const std::size_t ceiling = in_flight_ceiling();
  if (max_in_flight >= ceiling) return std::nullopt;
  const std::size_t to = std::min(ceiling, std::max(max_in_flight + 1, max_in_flight + max_in_flight / 2));
  const std::string busiest = upstream.empty() ? std::string("none")
                                                : loads_[upstream.front()].name + " " +
                                                      percent(loads_[upstream.front()].utilization);
  return accept(make(DecisionKind::grow_in_flight, "", max_in_flight, to,
                     sink.name + " starves " + percent(sink.starved) + " of the time and no stage is saturated (busiest: " +
                         busiest + "): more items in flight"));
}

std::vector<Decision> Autotuner::observe(const std::vector<StageStats>& stats, std::size_t max_in_flight,
                                         std::chrono::nanoseconds now) {
  std::vector<Decision> out;
  now_ = now;
  if (!have_baseline_ || previous_.size() != stats.size() || now <= previous_at_) {
    previous_ = stats;
    previous_at_ = now;
    have_baseline_ = true;
    return out;
  }
  measure(stats, now);
  previous_ = stats;
  previous_at_ = now;
  ++interval_;

  // A move waits to show what it bought; one that bought nothing (or cost) is undone.
  if (pending_) {
    if (--pending_->wait > 0) return out;
    const Pending judged = *std::exchange(pending_, std::nullopt);
    const double after = sink_rate();
    const double gain = judged.rate_before > 0 ? after / judged.rate_before - 1.0 : 0.0;
    const bool is_grow = judged.decision.kind == DecisionKind::grow || judged.decision.kind == DecisionKind::grow_in_flight;
    const bool failed = is_grow ? gain < options_.min_gain : gain < -options_.min_gain;
    if (failed) {
      // Each failure of the same move keeps it off twice as long (up to 32 times), so a move that
      // keeps failing on noisy input is tried ever more rarely.
      const std::string key = key_of(judged.decision.kind, judged.decision.stage);
      const int failures = std::min(++failures_[key], 6);
      tabu_until_[key] = interval_ + options_.tabu_intervals * (1 << (failures - 1));
      Decision undo = make(inverse(judged.decision.kind), judged.decision.stage, judged.decision.to,
                           judged.decision.from,
                           "undoing '" + judged.decision.why + "': the target's rate went from " +
                               std::to_string(static_cast<long long>(judged.rate_before)) + "/s to " +
                               std::to_string(static_cast<long long>(after)) + "/s");
      undo.revert = true;
      history_.push_back(undo);
      out.push_back(std::move(undo));
      cooldown_ = 1;
      return out;
    }
  }
  if (cooldown_ > 0) {
    --cooldown_;
    return out;
  }

  std::optional<Decision> proposal = propose(max_in_flight);
  const std::string key = proposal ? key_of(proposal->kind, proposal->stage) : std::string();
  streak_ = key == streak_key_ ? streak_ + 1 : 1;
  streak_key_ = key;
  if (!proposal || streak_ < options_.patience) return out;

  streak_ = 0;
  streak_key_.clear();
  pending_ = Pending{*proposal, sink_rate(), 2};
  history_.push_back(*proposal);
  out.push_back(std::move(*proposal));
  return out;
}

}  // namespace stoke::graph
