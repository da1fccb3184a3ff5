// Envelope: an item on its way between two stages, with what the executor needs to know of it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>

namespace stoke::graph::detail {

/// `value` is empty for a hole: a marker that the item with this `seq` was dropped, sent on only
/// so that ordered stages downstream can move past it.
template <class T>
struct Envelope {
  std::optional<T> value;
  std::uint64_t seq = 0;      ///< position on this edge; dense (0, 1, 2, ...) on every edge
  std::uint64_t index = 0;    ///< source index, for error reports
  std::uint32_t credits = 0;  ///< in-flight credit units this item holds (see Runtime)

  bool hole() const noexcept { return !value.has_value(); }
};

/// The output type of a sink.
struct Nothing {};

/// Releases entries in `seq` order, holding back those that arrive early.
template <class T>
class Reorder {
 public:
  void put(std::uint64_t seq, T value) { pending_.emplace(seq, std::move(value)); }

  /// The next entry in order, if it has arrived.
  std::optional<T> pop() {
    auto first = pending_.begin();
    if (first == pending_.end() || first->first != next_) return std::nullopt;
    std::optional<T> value(std::move(first->second));
    pending_.erase(first);
    ++next_;
    return value;
  }

  bool empty() const noexcept { return pending_.empty(); }
  std::size_t size() const noexcept { return pending_.size(); }

  /// Calls f on every held entry and forgets them (used when a run is cancelled).
  template <class F>
  void drain(F&& f) {
    for (auto& [seq, value] : pending_) f(value);
    pending_.clear();
  }

 private:
  std::map<std::uint64_t, T> pending_;
  std::uint64_t next_ = 0;
};

}  // namespace stoke::graph::detail
