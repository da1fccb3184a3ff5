// Several sources as one: bodies for Pipeline::source() that draw from several streams --
// mixed by weight, interleaved in turn, or zipped by position. One source stage, so the graph
// keeps one in-flight credit per item, whatever stream it came from.
//
//   // 70% of the items from `photos`, 30% from `scans`, chosen from the seed (the same run after
//   // run and on resume), going on with the rest when one runs out:
//   pipe.source("mixed", stoke::graph::mix({.weights = {0.7, 0.3}, .seed = 42,
//                                           .on_exhausted = stoke::graph::OnExhausted::continue_with_rest},
//                                          photos, scans))
//   // an image and its mask, read from two lists, item i with item i:
//   pipe.source("pairs", stoke::graph::zip(images, masks))   // std::tuple<Image, Mask>
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "stoke/graph/concepts.hpp"
#include "stoke/base/random.hpp"

namespace stoke::graph {

/// What a mix or an interleave does when one of its sources runs out.
enum class OnExhausted {
  stop,                ///< the stream ends there (every source contributes in proportion to the end)
  continue_with_rest,  ///< the others go on, the weights renormalized among them, until all are out
};

struct MixOptions {
  /// One per source, each finite and > 0; the share of the items drawn from it. Empty: equal.
  std::vector<double> weights{};
  /// The choices are a function of (seed, position): the same stream run after run.
  std::uint64_t seed = 0;
  OnExhausted on_exhausted = OnExhausted::stop;
  /// Positions to pass over first (a run resumed where another stopped): the mix replays the
  /// first `start` choices, calling the chosen sources and discarding what they give, so that
  /// each source is where it was. Cheap for sources of indices (nodes::DatasetSource).
  std::uint64_t start = 0;
};

namespace detail {

/// Calls source `i` of `sources` (a runtime index into a tuple of bodies of one value type).
template <class Value, class Tuple>
std::optional<Value> call_source(Tuple& sources, std::size_t i) {
  std::optional<Value> out;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((I == i ? (void)(out = std::get<I>(sources)()) : (void)0), ...);
  }(std::make_index_sequence<std::tuple_size_v<Tuple>>{});
  return out;
}

template <class F0, class... Fs>
inline constexpr bool same_values = (std::is_same_v<source_value_t<F0>, source_value_t<Fs>> && ...);

}  // namespace detail

/// A source body that draws each item from one of its sources, chosen at random by weight from
/// (seed, position): deterministic, and resumable exactly with MixOptions::start. Over n items,
/// source k's share tends to weights[k] / sum(weights) (with OnExhausted::stop, until the first
/// source runs out). Copyable when its sources are; one call at a time (a source stage's).
template <SourceBody... Fs>
class Mix {
  static_assert(sizeof...(Fs) >= 1, "mix needs at least one source");
  static_assert(detail::same_values<Fs...>, "the sources of a mix must give the same item type");

 public:
  using Value = source_value_t<std::tuple_element_t<0, std::tuple<Fs...>>>;
  static constexpr std::size_t count = sizeof...(Fs);

  /// Throws std::invalid_argument for a weight list of another length than the sources, or a
  /// weight that is not finite and > 0 (naming it).
  explicit Mix(MixOptions options, Fs... sources) : options_(std::move(options)), sources_(std::move(sources)...) {
    if (options_.weights.empty()) options_.weights.assign(count, 1.0);
    if (options_.weights.size() != count)
      throw std::invalid_argument("mix: " + std::to_string(options_.weights.size()) + " weights for " +
                                  std::to_string(count) + " sources; give one per source (or none, for equal shares)");
    for (std::size_t k = 0; k < count; ++k) {
      const double w = options_.weights[k];
      if (!std::isfinite(w) || !(w > 0))
        throw std::invalid_argument("mix: weights[" + std::to_string(k) + "] must be finite and > 0, got " +
                                    std::to_string(w));
      live_[k] = true;
    }
    for (std::uint64_t p = 0; p < options_.start; ++p)
      if (!next()) break;
  }

  std::optional<Value> operator()() { return next(); }

  /// Items given so far (the replayed `start` included): the position to resume from.
  std::uint64_t position() const noexcept { return position_; }
  /// Items given so far from each source.
  const std::array<std::uint64_t, count>& taken() const noexcept { return taken_; }

 private:
  std::optional<Value> next() {
    while (!ended_) {
      const std::size_t k = choose();
      if (k == count) break;
      std::optional<Value> item = detail::call_source<Value>(sources_, k);
      if (item) {
        ++taken_[k];
        ++position_;
        return item;
      }
      live_[k] = false;  // source k ran out: the same position is drawn again among the rest
      if (options_.on_exhausted == OnExhausted::stop) ended_ = true;
    }
    ended_ = true;
    return std::nullopt;
  }

  // The source for this position: u in [0, 1) from (seed, position, the live set's size), then
  // the cumulative weights of the live sources. count: none is left.
  std::size_t choose() const {
    double total = 0;
    std::size_t alive = 0;
    for (std::size_t k = 0; k < count; ++k)
      if (live_[k]) {
        total += options_.weights[k];
        ++alive;
      }
    if (alive == 0) return count;
    base::ItemRng rng(options_.seed, 0, position_, /*stream=*/0x6d6978 + alive);
    const double target = rng.uniform() * total;
    double cumulative = 0;
    std::size_t last = count;
    for (std::size_t k = 0; k < count; ++k) {
      if (!live_[k]) continue;
      cumulative += options_.weights[k];
      last = k;
      if (target < cumulative) return k;
    }
    return last;  // rounding at the very top
  }

  MixOptions options_;
  std::tuple<Fs...> sources_;
  std::array<bool, count> live_{};
  std::array<std::uint64_t, count> taken_{};
  std::uint64_t position_ = 0;
  bool ended_ = false;
};

/// mix(options, sources...): see Mix.
template <SourceBody... Fs>
Mix<Fs...> mix(MixOptions options, Fs... sources) {
  return Mix<Fs...>(std::move(options), std::move(sources)...);
}

/// A source body that takes one item from each source in turn: 0, 1, ..., n-1, 0, ... An
/// exhausted source ends the stream (OnExhausted::stop) or is passed over from then on.
template <SourceBody... Fs>
class Interleave {
  static_assert(sizeof...(Fs) >= 1, "interleave needs at least one source");
  static_assert(detail::same_values<Fs...>, "the sources of an interleave must give the same item type");

 public:
  using Value = source_value_t<std::tuple_element_t<0, std::tuple<Fs...>>>;
  static constexpr std::size_t count = sizeof...(Fs);

  explicit Interleave(OnExhausted on_exhausted, Fs... sources)
      : on_exhausted_(on_exhausted), sources_(std::move(sources)...) {
    live_.fill(true);
  }

  std::optional<Value> operator()() {
    for (std::size_t tried = 0; tried < count && !ended_; ++tried) {
      const std::size_t k = turn_;
      turn_ = (turn_ + 1) % count;
      if (!live_[k]) continue;
      if (std::optional<Value> item = detail::call_source<Value>(sources_, k)) return item;
      live_[k] = false;
      if (on_exhausted_ == OnExhausted::stop) ended_ = true;
    }
    ended_ = true;
    return std::nullopt;
  }

 private:
  OnExhausted on_exhausted_;
  std::tuple<Fs...> sources_;
  std::array<bool, count> live_{};
  std::size_t turn_ = 0;
  bool ended_ = false;
};

template <SourceBody... Fs>
Interleave<Fs...> interleave(OnExhausted on_exhausted, Fs... sources) {
  return Interleave<Fs...>(on_exhausted, std::move(sources)...);
}

/// A source body giving the tuple of each source's item at the same position; it ends with the
/// shortest source.
template <SourceBody... Fs>
class Zip {
  static_assert(sizeof...(Fs) >= 2, "zip needs at least two sources");

 public:
  using Value = std::tuple<source_value_t<Fs>...>;

  explicit Zip(Fs... sources) : sources_(std::move(sources)...) {}

  std::optional<Value> operator()() {
    if (ended_) return std::nullopt;
    auto items = std::apply([](auto&... source) { return std::make_tuple(source()...); }, sources_);
    const bool all = std::apply([](const auto&... item) { return (item.has_value() && ...); }, items);
    if (!all) {
      ended_ = true;
      return std::nullopt;
    }
    return std::apply([](auto&... item) { return Value(std::move(*item)...); }, items);
  }

 private:
  std::tuple<Fs...> sources_;
  bool ended_ = false;
};

template <SourceBody... Fs>
Zip<Fs...> zip(Fs... sources) {
  return Zip<Fs...>(std::move(sources)...);
}

}  // namespace stoke::graph
