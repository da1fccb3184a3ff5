// Pipeline: a linear streaming graph of stages running on a oneTBB flow graph.
//
//   stoke::graph::Pipeline pipe({.max_in_flight = 64});
//   pipe.source("count", [i = 0]() mutable -> std::optional<int> {
//         return i < 1000 ? std::optional(i++) : std::nullopt; })
//       .map("square", [](int x) { return x * x; }, {.concurrency = stoke::graph::parallel(4)})
//       .sink("print", [](int x) { std::cout << x << '\n'; }, {.ordered = true});
//   stoke::graph::RunReport report = pipe.run();
#pragma once

#include <cstddef>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoke/graph/concepts.hpp"
#include "stoke/graph/detail/async_stage.hpp"
#include "stoke/graph/detail/stages.hpp"
#include "stoke/graph/options.hpp"
#include "stoke/graph/stats.hpp"

namespace stoke::graph {

class Pipeline;

/// The open end of a pipeline under construction, carrying items of type T. Each call appends a
/// stage and returns the new open end. A Flow is a cheap handle; the Pipeline owns the stages.
template <Item T>
class Flow {
 public:
  /// Appends a stage calling `body(In) -> Out` once per item.
  template <class F>
  requires MapBody<F, T> Flow<map_result_t<F, T>> map(std::string name, F body, StageOptions options = {}) &&;

  /// Appends a stage calling `body(In) -> std::optional<Out>`; nullopt drops the item.
  template <class F>
  requires FilterBody<F, T> Flow<filter_value_t<F, T>> filter(std::string name, F body, StageOptions options = {}) &&;

  /// Appends a stage calling `body(In, Emitter<Out>&)`, which may emit any number of outputs;
  /// `body.flush(Emitter<Out>&)`, if it exists, runs once after the last input.
  template <Item Out, class F>
  requires EmitBody<F, T, Out> Flow<Out> emit(std::string name, F body, StageOptions options = {}) &&;

  /// Appends a stage calling `body(In, Completion<Out>)`, which starts work that finishes later,
  /// elsewhere (a GPU stream, another thread), and returns at once; the Completion, resolved from
  /// any thread, hands the output on (see completion.hpp). `concurrency` bounds the operations
  /// outstanding; no thread of the pipeline waits for them.
  template <Item Out, class F>
  requires AsyncBody<F, T, Out> Flow<Out> async(std::string name, F body, StageOptions options = {}) &&;

  /// Ends the pipeline with a stage calling `body(In)`.
  template <class F>
  requires SinkBody<F, T>
  void sink(std::string name, F body, StageOptions options = {}) &&;

 private:
  friend class Pipeline;
  template <Item U>
  friend class Flow;
  Flow(Pipeline& pipeline, detail::InputStage<T>*& tail_link) : pipeline_(&pipeline), link_(&tail_link) {}
  /// Stages form one chain: an open end continued twice would drop the first continuation.
  void check_open(const std::string& name) const {
    if (*link_ != nullptr)
      throw std::logic_error("stoke::graph: stage '" + name +
                             "' continues a Flow that was already continued; a pipeline is one chain");
  }

  Pipeline* pipeline_;
  detail::InputStage<T>** link_;  // where the next stage's address goes (the tail's `next`)
};

/// Owns the stages and runs them. Building is single-threaded; while run() executes, stop(),
/// cancel(), set_*() and stats() may be called from any thread.
class Pipeline {
 public:
  explicit Pipeline(PipelineOptions options = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// Starts the pipeline with a source calling `body() -> std::optional<Out>` until nullopt.
  template <class F>
  requires SourceBody<F> && Item<source_value_t<F>> Flow<source_value_t<F>> source(std::string name, F body);

  /// Runs to the end of the stream (or stop()/cancel()). Returns the report; rethrows the first
  /// OnError::fail failure as StageError once every stage has wound down and every item has been
  /// destroyed. Runs once per Pipeline.
  RunReport run();

  /// Stops the source; items already in flight finish. Safe from any thread.
  void stop() noexcept;
  /// Stops everything: queued items are destroyed unprocessed, running calls finish. Any thread.
  void cancel() noexcept;

  /// Changes a parallel stage's concurrency, clamped to its [min, max]. Any thread, any time.
  void set_concurrency(std::string_view stage, int concurrency);
  /// Changes a stage's input buffer bound (at least 1). Any thread, any time.
  void set_capacity(std::string_view stage, std::size_t capacity);
  /// Changes the end-to-end in-flight limit (at least 1). Any thread, any time.
  void set_max_in_flight(std::size_t limit);
  std::size_t max_in_flight() const noexcept;
  /// Source items alive in the graph now (at most max_in_flight(), but for a moment after it shrank).
  std::size_t in_flight() const noexcept;

  /// A consistent-per-stage snapshot of every stage, in pipeline order. Any thread, any time.
  std::vector<StageStats> stats() const;
  std::vector<std::string> stage_names() const;
  /// The items skipped so far (the first PipelineOptions::max_listed_skips), as RunReport lists
  /// them. Any thread, any time.
  std::vector<SkippedItem> skipped_items() const;

  /// Writes the recorded spans (PipelineOptions::trace) as Chrome trace JSON, for Perfetto or
  /// chrome://tracing. Throws std::runtime_error naming the path if it cannot be written.
  void write_trace(const std::filesystem::path& path) const;

 private:
  template <Item U>
  friend class Flow;

  template <class S, class... Args>
  S& add_stage(Args&&... args) {
    auto stage = std::make_unique<S>(*runtime_, std::forward<Args>(args)...);
    S& ref = *stage;
    adopt(std::move(stage));
    return ref;
  }
  void adopt(std::unique_ptr<detail::StageBase> stage);
  detail::StageBase& find(std::string_view name) const;

  std::unique_ptr<detail::Runtime> runtime_;
  std::vector<std::unique_ptr<detail::StageBase>> stages_;
  bool sealed_ = false;  // a sink was added
  bool ran_ = false;
};

// ---- implementation of the builder --------------------------------------------------------

template <class F>
requires SourceBody<F> && Item<source_value_t<F>> Flow<source_value_t<F>> Pipeline::source(std::string name, F body) {
  using Out = source_value_t<F>;
  auto& stage = add_stage<detail::SourceStage<Out, F>>(std::move(name), std::move(body));
  return Flow<Out>(*this, stage.next_link());
}

template <Item T>
template <class F>
requires MapBody<F, T> Flow<map_result_t<F, T>> Flow<T>::map(std::string name, F body, StageOptions options) && {
  check_open(name);
  using Out = map_result_t<F, T>;
  static_assert(Item<Out>, "a map stage must return a movable, non-reference value");
  auto& stage =
      pipeline_->add_stage<detail::Stage<T, Out, F, StageKind::map>>(std::move(name), std::move(body), options);
  *link_ = &stage;
  return Flow<Out>(*pipeline_, stage.next_link());
}

template <Item T>
template <class F>
requires FilterBody<F, T> Flow<filter_value_t<F, T>> Flow<T>::filter(std::string name, F body, StageOptions options) &&
{
  check_open(name);
  using Out = filter_value_t<F, T>;
  auto& stage =
      pipeline_->add_stage<detail::Stage<T, Out, F, StageKind::filter>>(std::move(name), std::move(body), options);
  *link_ = &stage;
  return Flow<Out>(*pipeline_, stage.next_link());
}

template <Item T>
template <Item Out, class F>
requires EmitBody<F, T, Out> Flow<Out> Flow<T>::emit(std::string name, F body, StageOptions options) && {
  check_open(name);
  auto& stage =
      pipeline_->add_stage<detail::Stage<T, Out, F, StageKind::emit>>(std::move(name), std::move(body), options);
  *link_ = &stage;
  return Flow<Out>(*pipeline_, stage.next_link());
}

template <Item T>
template <Item Out, class F>
requires AsyncBody<F, T, Out> Flow<Out> Flow<T>::async(std::string name, F body, StageOptions options) && {
  check_open(name);
  auto& stage = pipeline_->add_stage<detail::AsyncStage<T, Out, F>>(std::move(name), std::move(body), options);
  *link_ = &stage;
  return Flow<Out>(*pipeline_, stage.next_link());
}

template <Item T>
template <class F>
requires SinkBody<F, T>
void Flow<T>::sink(std::string name, F body, StageOptions options) && {
  check_open(name);
  auto& stage = pipeline_->add_stage<detail::Stage<T, detail::Nothing, F, StageKind::sink>>(std::move(name),
                                                                                            std::move(body), options);
  *link_ = &stage;
  pipeline_->sealed_ = true;
}

}  // namespace stoke::graph
