#include "stoke/graph/pipeline.hpp"

#include <optional>
#include <sstream>
#include <stdexcept>

#include "scheduler.hpp"

namespace stoke::graph {

Pipeline::Pipeline(PipelineOptions options) : runtime_(std::make_unique<detail::Runtime>(std::move(options))) {}

// Stages hold nodes of the runtime's graph: destroy them first.
Pipeline::~Pipeline() { stages_.clear(); }

void Pipeline::adopt(std::unique_ptr<detail::StageBase> stage) {
  if (sealed_) throw std::logic_error("stoke::graph: stage '" + stage->name() + "' added after the sink");
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

bool parallel_ordered(const detail::StageBase& s) { return s.parallel() && s.options().ordered; }

// Where order is restored: a serial ordered stage takes its input in order; a parallel ordered
// map/filter hands its output to a next stage that takes it in order. (A parallel ordered emit
// orders its own output, see Stage::complete_group.)
bool gated(const std::vector<std::unique_ptr<detail::StageBase>>& stages, std::size_t i) {
  if (i == 0) return false;
  const auto& s = *stages[i];
  const auto& prev = *stages[i - 1];
  return (!s.parallel() && s.options().ordered) || (parallel_ordered(prev) && prev.kind() != StageKind::emit);
}

bool needs_holes(const std::vector<std::unique_ptr<detail::StageBase>>& stages, std::size_t i) {
  return gated(stages, i) || (parallel_ordered(*stages[i]) && stages[i]->kind() == StageKind::emit);
}

// Holes matter only up to the next emit stage, which numbers its outputs afresh.
bool forward_holes(const std::vector<std::unique_ptr<detail::StageBase>>& stages, std::size_t i) {
  for (std::size_t j = i + 1; j < stages.size(); ++j) {
    if (needs_holes(stages, j)) return true;
    if (stages[j]->kind() == StageKind::emit) return false;
  }
  return false;
}

}  // namespace

RunReport Pipeline::run() {
  if (ran_) throw std::logic_error("stoke::graph: Pipeline::run() called twice; a pipeline runs once");
  if (stages_.empty()) throw std::logic_error("stoke::graph: the pipeline is empty; start it with source(...)");
  if (!sealed_) throw std::logic_error("stoke::graph: the pipeline has no sink; end it with .sink(...)");
  ran_ = true;

  for (std::size_t i = 0; i < stages_.size(); ++i) {
    detail::StageBase::Wiring w;
    w.id = static_cast<int>(i);
    w.upstream = i > 0 ? stages_[i - 1].get() : nullptr;
    w.downstream = i + 1 < stages_.size() ? stages_[i + 1].get() : nullptr;
    w.gated = gated(stages_, i);
    w.forward_holes = forward_holes(stages_, i);
    stages_[i]->wire(w);
  }
  const std::optional<AutotuneOptions>& autotune = runtime_->options().autotune;
  if (autotune && !autotune->target.empty()) find(autotune->target);  // throws naming the stages
  runtime_->set_source(stages_.front().get());
  runtime_->begin();
  for (auto& stage : stages_) stage->start(*runtime_);

  std::optional<detail::Scheduler> scheduler;
  if (autotune) scheduler.emplace(*this, *runtime_, *autotune);
  const auto begin = std::chrono::steady_clock::now();
  runtime_->execute_and_wait([&] { stages_.front()->wake(); });
  const auto elapsed = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - begin);
  std::vector<Decision> decisions;
  if (scheduler) {
    scheduler->stop();
    decisions = scheduler->decisions();
    scheduler.reset();  // joined: no move lands after this point
  }

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
  report.consumed = report.stages.back().items_out;
  report.skipped = runtime_->skipped();
  report.skipped_items = runtime_->skipped_items();
  report.cancelled = runtime_->cancelled();
  report.stopped = !report.cancelled && runtime_->cut_short();
  report.elapsed = elapsed;
  report.decisions = std::move(decisions);
  report.max_in_flight = max_in_flight();
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
