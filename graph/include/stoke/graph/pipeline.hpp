// Pipeline: a streaming graph of stages -- a chain, or branches that fan out and join again --
// running on oneTBB tasks.
//
//   stoke::graph::Pipeline pipe({.max_in_flight = 64});
//   pipe.source("count", [i = 0]() mutable -> std::optional<int> {
//         return i < 1000 ? std::optional(i++) : std::nullopt; })
//       .map("square", [](int x) { return x * x; }, {.concurrency = stoke::graph::parallel(4)})
//       .sink("print", [](int x) { std::cout << x << '\n'; }, {.ordered = true});
//   stoke::graph::RunReport report = pipe.run();
//
// A graph: one stream into two branches, each with its own stages, joined again by position.
//
//   auto [left, right] = pipe.source("count", ...).fan_out("views");
//   auto a = std::move(left).map("crop", crop, {.concurrency = stoke::graph::parallel(4)});
//   auto b = std::move(right).map("flip", flip);
//   stoke::graph::join("pair", std::move(a), std::move(b))   // Flow<std::tuple<A, B>>
//       .sink("train", [](std::tuple<A, B> pair) { ... });
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <filesystem>
#include <tuple>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoke/graph/concepts.hpp"
#include "stoke/graph/detail/async_stage.hpp"
#include "stoke/graph/detail/dag_stages.hpp"
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

  /// Ends this branch of the pipeline with a stage calling `body(In)`. A graph may have several
  /// sinks: one per branch that is not joined.
  template <class F>
  requires SinkBody<F, T>
  void sink(std::string name, F body, StageOptions options = {}) &&;

  /// Sends the stream into N branches: each gets every item, with its source position, so that
  /// branches can be joined again (graph::join). The last branch gets the item itself, the others
  /// a copy, which fan_out allows only where copying is cheap and shares nothing that a branch
  /// could write (fan_out_copies<T>): a cheap handle -- std::shared_ptr<const X>, made by
  /// .map("share", graph::share<X>) -- for anything big. An item starts into the branches only
  /// when each has room; its in-flight credit is shared by the copies and comes back once all are
  /// done.
  template <std::size_t N = 2>
  std::array<Flow<T>, N> fan_out(std::string name, StageOptions options = {}) &&;

 private:
  friend class Pipeline;
  template <Item U>
  friend class Flow;
  template <Item T0, Item... Ts>
  friend Flow<std::tuple<T0, Ts...>> join(std::string name, Flow<T0> first, Flow<Ts>... rest);
  template <Item T0, Item... Ts>
  friend Flow<std::tuple<T0, Ts...>> join(std::string name, JoinOptions options, Flow<T0> first, Flow<Ts>... rest);
  Flow(Pipeline& pipeline, detail::InputStage<T>*& tail_link) : pipeline_(&pipeline), link_(&tail_link) {}
  /// An open end continued twice would drop the first continuation.
  void check_open(const std::string& name) const {
    if (*link_ != nullptr)
      throw std::logic_error("stoke::graph: stage '" + name +
                             "' continues a Flow that was already continued; to send a stream into several "
                             "branches, fan_out(...) it");
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

  /// Joins branches of one fan_out back together: for each source position, the tuple of what
  /// each branch made of it, once every branch has delivered (in the order they finish; a stage
  /// with `.ordered = true` after the join restores source order). A position that any branch
  /// dropped (filtered, skipped) is dropped on all, counted once. Graph::join calls this.
  template <Item... Ts>
  Flow<std::tuple<Ts...>> join(std::string name, JoinOptions options, Flow<Ts>... branches);

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
}

template <Item T>
template <std::size_t N>
std::array<Flow<T>, N> Flow<T>::fan_out(std::string name, StageOptions options) && {
  static_assert(N >= 2, "fan_out makes at least 2 branches");
  static_assert(fan_out_copies<T>,
                "fan_out hands every branch but the last a copy of the item, and this item type is not one to copy "
                "silently (fan_out_copies<T> is false: not a small trivially copyable value, nor a "
                "std::shared_ptr<const X>): share it first with .map(\"share\", stoke::graph::share<T>), so the "
                "branches get one read-only item, or specialize stoke::graph::fan_out_copies<T> = true if its copies "
                "are cheap and independent");
  check_open(name);
  auto& stage = pipeline_->add_stage<detail::FanOutStage<T>>(std::move(name), N, options);
  *link_ = &stage;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    return std::array<Flow<T>, N>{Flow<T>(*pipeline_, stage.link(I))...};
  }(std::make_index_sequence<N>{});
}

template <Item... Ts>
Flow<std::tuple<Ts...>> Pipeline::join(std::string name, JoinOptions options, Flow<Ts>... branches) {
  static_assert(sizeof...(Ts) >= 2, "a join takes at least 2 branches");
  static_assert(sizeof...(Ts) <= 64, "a join takes at most 64 branches");
  const auto check = [&](const auto& flow) {
    if (flow.pipeline_ != this)
      throw std::logic_error("stoke::graph: join '" + name + "' got a branch of another pipeline");
    flow.check_open(name);
  };
  (check(branches), ...);
  auto core = std::make_shared<detail::JoinCore<Ts...>>(*runtime_, name, options.starve_after);
  auto flows = std::tie(branches...);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          auto& input = add_stage<detail::JoinInput<I, Ts...>>(name + "[" + std::to_string(I) + "]", core,
                                                               StageOptions{.capacity = options.capacity});
          *std::get<I>(flows).link_ = &input;
        }(),
        ...);
  }(std::index_sequence_for<Ts...>{});
  return Flow<std::tuple<Ts...>>(*this, core->link());
}

/// Joins branches of one fan_out back together by source position (Pipeline::join):
///   graph::join("pair", std::move(a), std::move(b)).sink(...)   // items: std::tuple<A, B>
template <Item T0, Item... Ts>
Flow<std::tuple<T0, Ts...>> join(std::string name, Flow<T0> first, Flow<Ts>... rest) {
  return first.pipeline_->join(std::move(name), JoinOptions{}, std::move(first), std::move(rest)...);
}

/// The same, with options (starvation, queue bounds).
template <Item T0, Item... Ts>
Flow<std::tuple<T0, Ts...>> join(std::string name, JoinOptions options, Flow<T0> first, Flow<Ts>... rest) {
  return first.pipeline_->join(std::move(name), options, std::move(first), std::move(rest)...);
}

}  // namespace stoke::graph
