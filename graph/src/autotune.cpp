#include "stoke/graph/autotune.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
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

// Intervals after a move at which it is judged.
constexpr int judge_after = 2;

// "1 call", "3 calls".
std::string calls(int n) { return std::to_string(n) + (n == 1 ? " call" : " calls"); }

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

int usable_cores() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::size_t available_memory() noexcept {
  try {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    std::size_t kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit)
      if (key == "MemAvailable:") return kib * 1024;
  } catch (...) {
  }
  const long pages = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

Autotuner::Autotuner(AutotuneOptions options) : options_(std::move(options)) {
  if (options_.cpu_budget <= 0) options_.cpu_budget = usable_cores();
  options_.smoothing = std::clamp(options_.smoothing, 0.01, 1.0);
  options_.patience = std::max(options_.patience, 1);
}

std::size_t Autotuner::in_flight_ceiling() const noexcept {
  std::size_t ceiling = std::numeric_limits<std::size_t>::max();
  if (options_.memory_budget > 0 && options_.item_bytes > 0)
    ceiling = std::max<std::size_t>(options_.memory_budget / options_.item_bytes, 1);
  if (options_.max_in_flight > 0)
    ceiling = std::min(ceiling, options_.max_in_flight);
  else if (options_.memory_budget == 0 || options_.item_bytes == 0)
    ceiling = default_cap_ > 0 ? default_cap_ : ceiling;
  return ceiling;
}

double Autotuner::cores_in_use() const noexcept {
  double cores = 0;
  for (const StageLoad& load : loads_) cores += load.cores();
  return cores;
}

std::size_t Autotuner::target_index() const noexcept {
  for (std::size_t i = 0; i < loads_.size(); ++i)
    if (loads_[i].name == options_.target) return i;
  return loads_.empty() ? 0 : loads_.size() - 1;
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
    load.kind = s.kind;
    load.utilization = a * std::clamp(busy, 0.0, 1.0) + (1 - a) * load.utilization;
    load.starved = a * std::clamp(starved, 0.0, 1.0) + (1 - a) * load.starved;
    load.blocked = a * std::clamp(blocked, 0.0, 1.0) + (1 - a) * load.blocked;
    load.rate = a * rate + (1 - a) * load.rate;
    load.concurrency = s.concurrency;
    load.min_concurrency = s.min_concurrency;
    load.max_concurrency = s.max_concurrency;
  }
}

bool Autotuner::is_tabu(const Decision& d) const {
  const auto it = tabu_until_.find(key_of(d.kind, d.stage));
  return it != tabu_until_.end() && interval_ < it->second;
}

Decision Autotuner::make(DecisionKind kind, const std::string& stage, std::size_t from, std::size_t to,
                         std::string why) const {
  return Decision{kind, stage, from, to, std::move(why), now_, false};
}

Decision Autotuner::one_more(const StageLoad& s, std::string why) const {
  const auto n = static_cast<std::size_t>(s.concurrency);
  return make(DecisionKind::grow, s.name, n, n + 1, std::move(why));
}

Decision Autotuner::one_less(const StageLoad& s, std::string why) const {
  const auto n = static_cast<std::size_t>(s.concurrency);
  return make(DecisionKind::shrink, s.name, n, n - 1, std::move(why));
}

bool Autotuner::fits_budget(const StageLoad& s) const {
  // One more call is about one more core (an async stage's operations run elsewhere): it must fit
  // the budget, give or take half a core (a stage's calls also wait, for I/O or locks).
  return s.kind == StageKind::async || cores_in_use() + 1.0 <= options_.cpu_budget + 0.5;
}

std::optional<Decision> Autotuner::propose(std::size_t max_in_flight) const {
  if (loads_.empty()) return std::nullopt;
  const std::size_t target = target_index();
  const StageLoad& sink = loads_[target];
  const auto accept = [&](const Decision& d) -> std::optional<Decision> {
    if (is_tabu(d)) return std::nullopt;
    return d;
  };

  if (sink.working() >= options_.saturated) {
    // The target is saturated: threads elsewhere that wait more than they work only spin and
    // hold items. The least used gives one back.
    std::vector<std::size_t> donors;
    for (std::size_t i = 0; i < loads_.size(); ++i)
      if (i != target && loads_[i].kind != StageKind::async && loads_[i].concurrency > loads_[i].min_concurrency &&
          loads_[i].utilization < options_.idle)
        donors.push_back(i);
    std::sort(donors.begin(), donors.end(),
              [&](std::size_t x, std::size_t y) { return loads_[x].utilization < loads_[y].utilization; });
    for (const std::size_t i : donors) {
      const StageLoad& d = loads_[i];
      if (auto decision = accept(one_less(d, sink.name + " is saturated (at work " + percent(sink.working()) + "); " +
                                                 d.name + " uses " + percent(d.utilization) + " of its " +
                                                 std::to_string(d.concurrency) + " calls: one goes back")))
        return decision;
    }
    return std::nullopt;
  }

  // The target waits. The bottleneck is the busiest saturated stage in front of it.
  std::vector<std::size_t> upstream;
  for (std::size_t i = 0; i < target; ++i) upstream.push_back(i);
  std::sort(upstream.begin(), upstream.end(),
            [&](std::size_t x, std::size_t y) { return loads_[x].utilization > loads_[y].utilization; });
  const std::string starving = sink.name + " idles " + percent(1.0 - sink.working()) + " of the time";
  bool any_saturated = false;
  for (const std::size_t i : upstream) {
    const StageLoad& b = loads_[i];
    if (b.utilization < options_.saturated) break;  // the rest are less busy still
    any_saturated = true;
    if (b.concurrency >= b.max_concurrency) continue;  // serial, or at its maximum
    if (!fits_budget(b)) return std::nullopt;          // the CPU budget is the limit: the stages use what they may
    if (auto decision = accept(one_more(b, starving + "; " + b.name + " is busy " + percent(b.utilization) +
                                               " of its " + calls(b.concurrency) + ": one more")))
      return decision;
  }
  if (any_saturated) return std::nullopt;

  // No stage in front is saturated, yet the target waits: items may be held back by the
  // in-flight limit (or the queues) rather than by work. Let more in flight.
  const std::size_t ceiling = in_flight_ceiling();
  const std::string busiest = upstream.empty()
                                  ? std::string("none")
                                  : loads_[upstream.front()].name + " " + percent(loads_[upstream.front()].utilization);
  // (Not when the cores are all busy: then more items only queue for them.)
  const bool cpu_full = cores_in_use() + 0.5 > options_.cpu_budget;
  if (max_in_flight < ceiling && !cpu_full) {
    const std::size_t step = sink.working() < 0.5 ? max_in_flight : max_in_flight / 2;
    const std::size_t to = std::min(ceiling, max_in_flight + std::max<std::size_t>(step, 1));
    if (auto decision = accept(
            make(DecisionKind::grow_in_flight, "", max_in_flight, to,
                 starving + " and no stage in front is saturated (busiest: " + busiest + "): more items in flight")))
      return decision;
  }

  // More in flight does not help (or may not grow): the stages hand items on with gaps (too few
  // threads for them all, say). The busiest, if it works more than it idles, gets one more call.
  if (upstream.empty()) return std::nullopt;
  const StageLoad& b = loads_[upstream.front()];
  if (b.utilization < options_.idle || b.concurrency >= b.max_concurrency || !fits_budget(b)) return std::nullopt;
  return accept(one_more(b, starving + "; more in flight did not help and " + b.name + " is the busiest stage (" +
                                percent(b.utilization) + " of its " + calls(b.concurrency) + "): one more"));
}

std::vector<Decision> Autotuner::judge(const Pending& judged) {
  const std::uint64_t progress = marks_.back().progress;
  const double items = progress > judged.progress_at ? static_cast<double>(progress - judged.progress_at) : 0.0;
  const double span = seconds(now_ - judged.made_at);
  const double after = span > 0 ? items / span : 0.0;
  const double gain = judged.rate_before > 0 ? after / judged.rate_before - 1.0 : 0.0;
  // Counting whole items resolves a rate to about one item per window: a change smaller than that
  // is not evidence either way, and the move stands.
  const double resolution = std::min(0.25, 1.0 / std::max(judged.items_before, 1.0) + 1.0 / std::max(items, 1.0));
  const DecisionKind kind = judged.decision.kind;
  const bool is_grow = kind == DecisionKind::grow || kind == DecisionKind::grow_in_flight;
  const bool failed = is_grow ? gain < options_.min_gain - resolution : gain < -options_.min_gain - resolution;
  if (!failed) return {};

  // A grow that took its stage out of saturation while another stage in front of the target is
  // saturated found a bottleneck shared by two stages: grow the other too, and judge both.
  if (kind == DecisionKind::grow && judged.chain.size() < 2) {
    const std::size_t target = target_index();
    for (std::size_t i = 0; i < target; ++i) {
      const StageLoad& grown = loads_[i];
      if (grown.name != judged.decision.stage || grown.utilization >= options_.saturated) continue;
      for (std::size_t j = 0; j < target; ++j) {
        const StageLoad& other = loads_[j];
        if (j == i || other.utilization < options_.saturated || other.concurrency >= other.max_concurrency) continue;
        if (!fits_budget(other)) break;
        Pending next = judged;
        next.chain.push_back(judged.decision);
        next.decision = one_more(other, grown.name + " grew without gain and is no longer saturated (busy " +
                                            percent(grown.utilization) + "); " + other.name + ", busy " +
                                            percent(other.utilization) + ", limits it too: one more");
        next.progress_at = progress;
        next.made_at = now_;
        next.wait = judge_after;
        pending_ = next;
        return {next.decision};
      }
    }
  }

  // Each failure of the same move keeps it off twice as long (up to 32 times), so a move that
  // keeps failing on noisy input is tried ever more rarely.
  const Decision& first = judged.chain.empty() ? judged.decision : judged.chain.front();
  const std::string key = key_of(first.kind, first.stage);
  const int failures = std::min(++failures_[key], 6);
  tabu_until_[key] = interval_ + options_.tabu_intervals * (1 << (failures - 1));
  std::vector<Decision> undo;
  const auto revert = [&](const Decision& d) {
    Decision u = make(inverse(d.kind), d.stage, d.to, d.from,
                      "undoing '" + d.why + "': throughput went from " +
                          std::to_string(static_cast<long long>(judged.rate_before)) + "/s to " +
                          std::to_string(static_cast<long long>(after)) + "/s");
    u.revert = true;
    undo.push_back(std::move(u));
  };
  revert(judged.decision);
  for (auto it = judged.chain.rbegin(); it != judged.chain.rend(); ++it) revert(*it);
  return undo;
}

std::vector<Decision> Autotuner::observe(const std::vector<StageStats>& stats, std::size_t max_in_flight,
                                         std::chrono::nanoseconds now, std::size_t in_flight) {
  std::vector<Decision> out;
  now_ = now;
  // Progress: source items that left the pipeline, the finest count (one per sample where the
  // target may count batches), and one that filling a larger in-flight limit does not inflate.
  const std::uint64_t produced = stats.empty() ? 0 : stats.front().items_out;
  const std::uint64_t progress = produced > in_flight ? produced - in_flight : 0;
  if (!have_baseline_ || previous_.size() != stats.size() || now <= previous_at_) {
    previous_ = stats;
    previous_at_ = now;
    have_baseline_ = true;
    default_cap_ = std::max<std::size_t>(16 * max_in_flight, 256);
    marks_.assign(1, Mark{now, progress});
    return out;
  }
  measure(stats, now);
  previous_ = stats;
  previous_at_ = now;
  marks_.push_back(Mark{now, progress});
  if (marks_.size() > 3) marks_.erase(marks_.begin());
  ++interval_;

  // A move waits to show what it bought; one that bought nothing (or cost) is undone.
  if (pending_) {
    if (--pending_->wait > 0) return out;
    const Pending judged = *std::exchange(pending_, std::nullopt);
    out = judge(judged);
    if (!out.empty()) {
      history_.insert(history_.end(), out.begin(), out.end());
      cooldown_ = pending_ ? 0 : 1;  // a chained grow waits to be judged; after an undo, one interval
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
  const Mark& first = marks_.front();
  const double window = seconds(now - first.at);
  const double items_before = progress > first.progress ? static_cast<double>(progress - first.progress) : 0.0;
  pending_ = Pending{*proposal, {}, window > 0 ? items_before / window : 0.0, items_before, progress, now, judge_after};
  history_.push_back(*proposal);
  out.push_back(std::move(*proposal));
  return out;
}

}  // namespace stoke::graph
