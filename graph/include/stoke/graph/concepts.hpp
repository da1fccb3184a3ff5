// The shapes a stage body may take, checked at compile time.
#pragma once

#include <concepts>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "stoke/graph/completion.hpp"
#include "stoke/graph/emitter.hpp"
#include "stoke/graph/wake.hpp"

namespace stoke::graph {

namespace detail {
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};
}  // namespace detail

/// The value a pipeline carries: movable, and destructible (destroying an item must release what
/// it holds, e.g. return a pooled buffer).
template <class T>
concept Item = std::movable<T> && std::destructible<T> && !std::is_reference_v<T>;

namespace detail {
template <class T>
struct is_shared_const : std::false_type {};
template <class T>
struct is_shared_const<std::shared_ptr<const T>> : std::true_type {};
}  // namespace detail

/// Whether Flow::fan_out may give each branch its own copy of a T: true for a value whose copy is
/// a small memcpy with nothing to destroy (indices, numbers, small plain structs) and for a
/// std::shared_ptr<const X> (one item, shared read-only). Anything else -- an image, whose copy is
/// a deep copy per branch or, for a cv::Mat, a shallow one that two branches then write -- is
/// refused at compile time, with the way out: share it (graph::share), or specialize this to true
/// for a type whose copies are cheap and independent.
template <class T>
inline constexpr bool fan_out_copies =
    (std::is_trivially_copy_constructible_v<T> && std::is_trivially_destructible_v<T> && sizeof(T) <= 128) ||
    detail::is_shared_const<T>::value;

/// Makes an item a cheap shared handle for a fan-out: `.map("share", stoke::graph::share<Image>)`.
template <class T>
std::shared_ptr<const T> share(T item) {
  return std::make_shared<const T>(std::move(item));
}

/// `std::optional<Out>()`: the next item, or nullopt at the end of the stream. Called serially.
template <class F>
concept SourceBody = std::invocable<F&> && detail::is_optional<std::invoke_result_t<F&>>::value;

/// `Out(In)`: one output per input.
template <class F, class In>
concept MapBody = std::invocable<F&, In&&> && !std::is_void_v<std::invoke_result_t<F&, In&&>> &&
                  !detail::is_optional<std::invoke_result_t<F&, In&&>>::value;

/// `std::optional<Out>(In)`: one output or none (the item is dropped).
template <class F, class In>
concept FilterBody = std::invocable<F&, In&&> && detail::is_optional<std::invoke_result_t<F&, In&&>>::value;

/// `void(In, Emitter<Out>&)`: any number of outputs per input; may also have
/// `flush(Emitter<Out>&)`, called once after the last input (e.g. a final partial batch).
template <class F, class In, class Out>
concept EmitBody = std::invocable < F&,
        In&&, Emitter<Out>
& > &&std::is_void_v<std::invoke_result_t<F&, In&&, Emitter<Out>&>>;

/// `void(In, Completion<Out>)`: starts work that resolves the Completion later, from any thread.
template <class F, class In, class Out>
concept AsyncBody =
    std::invocable<F&, In&&, Completion<Out> &&>&& std::is_void_v<std::invoke_result_t<F&, In&&, Completion<Out>&&>>;

template <class F, class Out>
concept Flushable = requires(F& f, Emitter<Out>& out) {
  f.flush(out);
};

/// A body that needs more than an input to run (see wake.hpp): the stage starts a call only while
/// `ready(wake)` is true. When it returns false, the body (or the resource it asked) keeps `wake`
/// and rings it once it may be true again; until then the stage parks without a thread. ready()
/// is called under the stage's lock, between the body's calls for a serial stage (alongside them
/// for a parallel one), and must not call into the pipeline.
template <class F>
concept Gated = requires(F& f, const Wake& wake) {
  { f.ready(wake) } -> std::same_as<bool>;
};

/// A gated body whose flush() needs the resource too: the stage finishes (calls flush()) only once
/// `ready_to_flush(wake)` is true. Without it, flush() is not gated.
template <class F>
concept GatedFlush = Gated<F> && requires(F& f, const Wake& wake) {
  { f.ready_to_flush(wake) } -> std::same_as<bool>;
};

/// `void(In)`: consumes items at the end of the pipeline.
template <class F, class In>
concept SinkBody = std::invocable<F&, In&&> && std::is_void_v<std::invoke_result_t<F&, In&&>>;

template <SourceBody F>
using source_value_t = typename std::invoke_result_t<F&>::value_type;
template <class F, class In>
using map_result_t = std::remove_cvref_t<std::invoke_result_t<F&, In&&>>;
template <class F, class In>
using filter_value_t = typename std::remove_cvref_t<std::invoke_result_t<F&, In&&>>::value_type;

}  // namespace stoke::graph
