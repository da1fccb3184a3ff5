#include "stoke/graph/pipeline.hpp"

#include <algorithm>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "scheduler.hpp"
#include "watchdog.hpp"

namespace stoke::graph {

Pipeline::Pipeline(PipelineOptions options) : runtime_(std::make_unique<detail::Runtime>(std::move(options))) {}

// Stages hold nodes of the runtime's graph: destroy them first.
Pipeline::~Pipeline() { stages_.clear(); }

void Pipeline::adopt(std::unique_ptr<detail::StageBase> stage) {
  if (ran_) throw std::logic_error("stoke::graph: stage '" + stage->name() + "' added after run()");
  if (stage->kind() == StageKind::source && !stages_.empty())
    throw std::logic_error("stoke::graph: a pipeline has one source; '" + stage->name() + "' would be a second");
  for (const auto& existing : stages_)
    if (existing->name() == stage->name())
      throw std::invalid_argument("stoke::graph: two stages named '" + stage->name() + "'; stage names must be unique");
  stages_.push_back(std::move(stage));
}

detail::StageBase& Pipeline::find(std::string_view name) const {
  for (const auto& stage : stages_)
    if (stage->name() == name) return *stage;
  std::string known;
  for (const auto& stage : stages_) known += (known.empty() ? "" : ", ") + stage->name();
  throw std::invalid_argument("stoke::graph: no stage named '" + std::string(name) + "' (stages: " + known + ")");
}

namespace {

using StageList = std::vector<std::unique_ptr<detail::StageBase>>;

bool parallel_ordered(const detail::StageBase& s) { return s.parallel() && s.options().ordered; }

// The graph's edges, found from each stage's outputs: who feeds whom, by position in `stages`
// (the order they were added in, which puts every stage after those that feed it).
struct Topology {
  std::vector<std::vector<std::size_t>> up;
  std::vector<std::vector<std::size_t>> down;

  explicit Topology(const StageList& stages) : up(stages.size()), down(stages.size()) {
    std::unordered_map<const detail::StageBase*, std::size_t> position;
    for (std::size_t i = 0; i < stages.size(); ++i) position[stages[i].get()] = i;
    for (std::size_t i = 0; i < stages.size(); ++i) {
      for (const detail::StageBase* out : stages[i]->outputs()) {
        if (out == nullptr)
          throw std::logic_error("stoke::graph: the stream out of stage '" + stages[i]->name() +
                                 "' goes nowhere; end each branch with .sink(...), or join it");
        down[i].push_back(position.at(out));
        up[position.at(out)].push_back(i);
      }
    }
  }
};

// Where order is restored: a serial ordered stage takes its input in order; a parallel ordered
// map/filter (or fan-out) hands its output to a next stage that takes it in order. (A parallel
// ordered emit orders its own output, see Stage::complete_group.)
bool gated(const StageList& stages, const Topology& graph, std::size_t i) {
  if (graph.up[i].empty()) return false;
  const auto& s = *stages[i];
  if (!s.parallel() && s.options().ordered) return true;
  if (graph.up[i].size() != 1) return false;
  const auto& prev = *stages[graph.up[i].front()];
  return parallel_ordered(prev) && prev.kind() != StageKind::emit;
}

// A join needs a part (item or hole) of every position from each branch.
bool needs_holes(const StageList& stages, const Topology& graph, std::size_t i) {
  const auto& s = *stages[i];
  return gated(stages, graph, i) || (parallel_ordered(s) && s.kind() == StageKind::emit) || s.kind() == StageKind::join;
}

// Holes matter only up to the next emit stage, which numbers its outputs afresh.
bool forward_holes(const StageList& stages, const Topology& graph, std::size_t i) {
  for (const std::size_t j : graph.down[i]) {
    if (needs_holes(stages, graph, j)) return true;
    if (stages[j]->kind() != StageKind::emit && forward_holes(stages, graph, j)) return true;
  }
  return false;
}

// A join pairs items by their seq: its branches must carry one numbering, made by one source or
// emit stage (the numbering's origin) and kept by every stage after it.
void check_joins(const StageList& stages, const Topology& graph) {
  std::vector<std::size_t> origin(stages.size());
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const auto& ups = graph.up[i];
    const bool renumbers = ups.empty() || stages[i]->kind() == StageKind::emit;
    origin[i] = renumbers ? i : origin[ups.front()];
    for (const std::size_t u : ups) {
      if (origin[u] == origin[ups.front()]) continue;
      std::string join = stages[ups.front()]->name();
      join = join.substr(0, join.rfind('['));
      throw std::logic_error("stoke::graph: join '" + join + "' pairs items by source position, but its inputs '" +
                             stages[ups.front()]->name() + "' and '" + stages[u]->name() +
                             "' are numbered by different stages ('" + stages[origin[ups.front()]]->name() + "' and '" +
                             stages[origin[u]]->name() +
                             "'); join branches of one fan_out, with no emit stage between the fan-out and the join");
    }
  }
}

}  // namespace

RunReport Pipeline::run() {
  if (ran_) throw std::logic_error("stoke::graph: Pipeline::run() called twice; a pipeline runs once");
  if (stages_.empty()) throw std::logic_error("stoke::graph: the pipeline is empty; start it with source(...)");
  const Topology graph(stages_);
  if (std::none_of(stages_.begin(), stages_.end(), [](const auto& s) { return s->kind() == StageKind::sink; }))
    throw std::logic_error("stoke::graph: the pipeline has no sink; end it with .sink(...)");
  check_joins(stages_, graph);
  ran_ = true;

  const auto pointers = [&](const std::vector<std::size_t>& positions) {
    std::vector<detail::StageBase*> out;
    for (const std::size_t p : positions) out.push_back(stages_[p].get());
    return out;
  };
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    detail::StageBase::Wiring w;
    w.id = static_cast<int>(i);
    const auto& ups = graph.up[i];
    const auto& downs = graph.down[i];
    if (ups.size() == 1) w.upstream = stages_[ups.front()].get();
    if (ups.size() > 1) w.upstreams = pointers(ups);
    if (downs.size() == 1) w.downstream = stages_[downs.front()].get();
    if (downs.size() > 1) w.downstreams = pointers(downs);
    w.gated = gated(stages_, graph, i);
    w.forward_holes = forward_holes(stages_, graph, i);
    stages_[i]->wire(w);
  }
  for (auto& stage : stages_) stage->on_wired();
  const std::optional<AutotuneOptions>& autotune = runtime_->options().autotune;
  if (autotune && !autotune->target.empty()) find(autotune->target);  // throws naming the stages
  runtime_->set_source(stages_.front().get());
  runtime_->begin();
  for (auto& stage : stages_) stage->start(*runtime_);

  std::optional<detail::Scheduler> scheduler;
  if (autotune) scheduler.emplace(*this, *runtime_, *autotune);
  std::optional<detail::Watchdog> watchdog;
  if (runtime_->watching()) {
    std::vector<detail::StageBase*> all;
    for (auto& stage : stages_) all.push_back(stage.get());
    watchdog.emplace(*runtime_, std::move(all));
  }
  const auto begin = std::chrono::steady_clock::now();
  runtime_->execute_and_wait([&] { stages_.front()->wake(); });
  const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - begin);
  std::vector<Decision> decisions;
  if (scheduler) {
    scheduler->stop();
    decisions = scheduler->decisions();
    scheduler.reset();  // joined: no move lands after this point
  }
  std::vector<Stall> stalls;
  if (watchdog) stalls = watchdog->finish();

  for (const auto& stage : stages_) {
    if (!stage->finished()) {
      std::ostringstream message;
      message << "stoke::graph: the pipeline stalled before stage '" << stage->name()
              << "' finished (an executor bug; please report it with this table)\n";
      RunReport partial;
      partial.stages = stats();
      print(message, partial);
      throw std::logic_error(message.str());
    }
  }
  runtime_->rethrow_failure();

  RunReport report;
  report.stages = stats();
  report.produced = report.stages.front().items_out;
  for (const auto& stage : report.stages)
    if (stage.kind == StageKind::sink) report.consumed += stage.items_out;
  report.skipped = runtime_->skipped();
  report.skipped_items = runtime_->skipped_items();
  report.cancelled = runtime_->cancelled();
  report.stopped = !report.cancelled && runtime_->cut_short();
  report.elapsed = elapsed;
  report.decisions = std::move(decisions);
  report.max_in_flight = max_in_flight();
  report.stalls = std::move(stalls);
  return report;
}

void Pipeline::stop() noexcept { runtime_->request_stop(); }
void Pipeline::cancel() noexcept { runtime_->cancel(); }

void Pipeline::set_concurrency(std::string_view stage, int concurrency) { find(stage).set_concurrency(concurrency); }
void Pipeline::set_capacity(std::string_view stage, std::size_t capacity) { find(stage).set_capacity(capacity); }
void Pipeline::set_max_in_flight(std::size_t limit) { runtime_->set_max_in_flight(limit); }
std::size_t Pipeline::max_in_flight() const noexcept { return runtime_->max_in_flight(); }
std::size_t Pipeline::in_flight() const noexcept { return runtime_->in_flight(); }

std::vector<SkippedItem> Pipeline::skipped_items() const { return runtime_->skipped_items(); }

std::vector<StageStats> Pipeline::stats() const {
  std::vector<StageStats> all;
  all.reserve(stages_.size());
  for (const auto& stage : stages_) all.push_back(stage->stats());
  return all;
}

std::vector<std::string> Pipeline::stage_names() const {
  std::vector<std::string> names;
  for (const auto& stage : stages_) names.push_back(stage->name());
  return names;
}

void Pipeline::write_trace(const std::filesystem::path& path) const {
  runtime_->write_trace(path.string(), stage_names());
}

}  // namespace stoke::graph
