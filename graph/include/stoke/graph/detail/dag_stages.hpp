// The stages that make a pipeline a graph: a fan-out (one stream into several branches) and the
// inputs of a join (the branches' items of one source position, back into one tuple).
#pragma once

#include <oneapi/tbb/spin_mutex.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "stoke/graph/detail/stages.hpp"
#include "stoke/graph/errors.hpp"

namespace stoke::graph::detail {

/// Splits `credits` (units, see Runtime) into `parts` that add up to it: the first part takes
/// the remainder.
inline std::uint32_t credit_part(std::uint32_t credits, std::size_t parts, std::size_t i) noexcept {
  const auto share = static_cast<std::uint32_t>(credits / parts);
  return i == 0 ? credits - share * static_cast<std::uint32_t>(parts - 1) : share;
}

// ---- fan-out ----------------------------------------------------------------------------------

/// Hands a copy of each item to every branch (the last branch gets the item itself), keeping its
/// seq, so that the branches can be joined again by position. The item's in-flight credit is
/// split between the copies: it returns whole once every branch is done with its copy. A hole
/// goes to every branch that forwards holes. Starts an item only when every branch has room.
template <class T>
class FanOutStage final : public InputStage<T> {
  using Base = InputStage<T>;

 public:
  FanOutStage(Runtime& runtime, std::string name, std::size_t branches, StageOptions options)
      : Base(runtime, std::move(name), StageKind::fan_out, options), links_(branches, nullptr) {}

  /// Where branch i's first stage goes. The vector is sized once: the references stay valid.
  InputStage<T>*& link(std::size_t i) noexcept { return links_[i]; }
  std::vector<StageBase*> outputs() const override { return {links_.begin(), links_.end()}; }

 protected:
  void run_with(Envelope<T>&& item, typename Base::Visit visit) override {
    this->run_loop(item, visit, [this](Envelope<T>&& claimed) { return hand_out(std::move(claimed)); });
  }

  void pass_hole(Envelope<T>&& hole) override {
    for (std::size_t i = 0; i < links_.size(); ++i) {
      const std::uint32_t part = credit_part(hole.credits, links_.size(), i);
      if (this->wiring_.forward_holes)
        links_[i]->push(Envelope<T>{std::nullopt, hole.seq, hole.index, part});
      else
        this->runtime_.release_credits(part);
    }
  }

  void on_finish() override {
    for (InputStage<T>* next : links_) next->close_input();
  }

 private:
  Follow<T> hand_out(Envelope<T>&& item) {
    const typename Base::CallTiming call = this->begin_call();
    const std::size_t n = links_.size();
    Follow<T> follow;
    // Copies first (the item is still whole), the item itself last; the first branch with a free
    // slot takes this thread along.
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t part = credit_part(item.credits, n, i);
      std::optional<T> value = i + 1 < n ? std::optional<T>(*item.value) : std::move(item.value);
      Follow<T> next;
      links_[i]->push(Envelope<T>{std::move(value), item.seq, item.index, part}, !follow ? &next : nullptr, call.begin);
      if (next) follow = std::move(next);
    }
    this->tallies_.add(&Tally::out, std::uint64_t{1});
    follow.at = this->account(item.index, call);
    return follow;
  }

  std::vector<InputStage<T>*> links_;
};

// ---- join -------------------------------------------------------------------------------------

/// What a join waits on: for each seq of the fan-out's numbering, the parts from each branch.
/// Shared by the join's inputs (one JoinInput per branch); its own lock, taken once per part.
template <class... Ts>
class JoinCore {
 public:
  using Out = std::tuple<Ts...>;
  static constexpr std::size_t arity = sizeof...(Ts);

  JoinCore(Runtime& runtime, std::string name, std::size_t starve_after)
      : runtime_(runtime), name_(std::move(name)), starve_after_(starve_after), branch_names_(arity) {}

  InputStage<Out>*& link() noexcept { return out_.link(); }
  InputStage<Out>* next() const noexcept { return out_.next(); }
  const std::string& name() const noexcept { return name_; }
  void set_forward_holes(bool forward) noexcept { forward_holes_ = forward; }
  void set_branch_name(std::size_t i, std::string name) { branch_names_[i] = std::move(name); }

  /// Branch I's part (an item, or a hole: its branch dropped it). When it is the last part of its
  /// position, the tuple goes downstream -- or, if any part was a hole, the position is dropped
  /// (one drop, counted here) and its credits come back. Returns where to go next when the
  /// tuple's push reserved a slot for this thread (`follow`).
  template <std::size_t I>
  Follow<Out> deposit(Envelope<std::tuple_element_t<I, Out>>&& part, bool follow) {
    std::optional<Group> complete;
    {
      std::lock_guard lock(mutex_);
      auto at = groups_.find(part.seq);
      if (at == groups_.end()) {
        // The position's first part: a table entry from the spares (no allocation once warm).
        typename Table::node_type node;
        if (spares_.empty()) {
          at = groups_.try_emplace(part.seq).first;
        } else {
          node = std::move(spares_.back());
          spares_.pop_back();
          node.key() = part.seq;
          node.mapped() = Group{};
          at = groups_.insert(std::move(node)).position;
        }
      }
      Group& group = at->second;
      group.credits += part.credits;
      group.index = part.index;
      if (part.hole()) {
        group.holes |= std::uint64_t{1} << I;
      } else {
        std::get<I>(group.parts) = std::move(part.value);
      }
      if (++group.arrived == arity) {
        complete.emplace(std::move(group));
        spares_.push_back(groups_.extract(at));
      }
    }
    if (!complete) return {};
    return finish_group(part.seq, std::move(*complete), follow);
  }

  /// One input has finished; the last one closes the join's output. Positions still waiting for a
  /// part then were lost (a cancelled run discards queued items): their credits come back, and
  /// outside a cancel that is an executor error.
  void input_finished() {
    if (finished_inputs_.fetch_add(1) + 1 != arity) return;
    std::uint64_t credits = 0;
    std::size_t lost = 0;
    {
      std::lock_guard lock(mutex_);
      for (auto& [seq, group] : groups_) credits += group.credits;
      lost = groups_.size();
      groups_.clear();
    }
    runtime_.release_credits(credits);
    if (!runtime_.cancelled()) {
      if (lost > 0) {
        fail("join '" + name_ + "': " + std::to_string(lost) +
             " positions never got a part from every branch (an executor bug; please report it)");
      } else if (joined_.load() == 0 && dropped_.load() > 0) {
        fail(starving_message(dropped_.load(), "every one of the " + std::to_string(dropped_.load()) + " positions"));
      }
    }
    out_.next()->close_input();
  }

  std::uint64_t joined() const noexcept { return joined_.load(); }
  std::uint64_t dropped() const noexcept { return dropped_.load(); }

 private:
  struct Group {
    std::tuple<std::optional<Ts>...> parts;
    std::uint64_t holes = 0;  // bit i: branch i dropped this position
    std::uint64_t index = 0;
    std::uint32_t credits = 0;
    std::size_t arrived = 0;
  };

  Follow<Out> finish_group(std::uint64_t seq, Group&& group, bool follow) {
    if (group.holes == 0) {
      consecutive_drops_.store(0, std::memory_order_relaxed);
      joined_.fetch_add(1, std::memory_order_relaxed);
      Out value = std::apply([](auto&... parts) { return Out(std::move(*parts)...); }, group.parts);
      Follow<Out> next;
      out_.next()->push(Envelope<Out>{std::move(value), seq, group.index, group.credits}, follow ? &next : nullptr);
      return next;
    }
    // Dropped on some branch: the partners go too (destroyed here, before their credits return).
    group.parts = {};
    dropped_.fetch_add(1, std::memory_order_release);
    for (std::size_t i = 0; i < arity; ++i)
      if (group.holes & (std::uint64_t{1} << i)) last_dropper_.store(i, std::memory_order_relaxed);
    const std::size_t in_a_row = consecutive_drops_.fetch_add(1, std::memory_order_relaxed) + 1;
    out_.hole(runtime_, forward_holes_, seq, group.index, group.credits);
    if (starve_after_ > 0 && in_a_row == starve_after_ && joined_.load() == 0)
      fail(starving_message(in_a_row, "the first " + std::to_string(in_a_row) + " positions"));
    return {};
  }

  std::string starving_message(std::uint64_t drops, const std::string& which) const {
    const std::size_t branch = last_dropper_.load();
    const std::string branch_name =
        branch_names_[branch].empty() ? std::string() : " ('" + branch_names_[branch] + "')";
    return "join '" + name_ + "' starves: its branches dropped " + which + " (" + std::to_string(drops) +
           " in all, none joined; branch " + std::to_string(branch) + branch_name +
           " dropped the last), so the join can never complete -- check that branch's filters and skips";
  }

  void fail(const std::string& message) {
    runtime_.fail(StageError(name_, no_index, std::make_exception_ptr(std::runtime_error(message))));
  }

  Runtime& runtime_;
  const std::string name_;
  const std::size_t starve_after_;
  std::vector<std::string> branch_names_;
  bool forward_holes_ = false;
  Outlet<Out> out_;
  using Table = std::unordered_map<std::uint64_t, Group>;
  // A spin lock (oneTBB's): the sections are a table lookup and a few moves.
  tbb::spin_mutex mutex_;
  Table groups_;                                  // guarded by mutex_: positions waiting for parts
  std::vector<typename Table::node_type> spares_;  // guarded by mutex_: entries to reuse
  std::atomic<std::size_t> finished_inputs_{0};
  std::atomic<std::uint64_t> joined_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::size_t> consecutive_drops_{0};
  std::atomic<std::size_t> last_dropper_{0};
};

/// Branch I's input of a join: a serial stage that hands each item (or hole) to the JoinCore.
/// Its stats are the branch's: items in, the queue in front of the join, and (items_out) the
/// parts deposited. It forwards its branch's holes to the core, which needs one per position.
template <std::size_t I, class... Ts>
class JoinInput final : public InputStage<std::tuple_element_t<I, std::tuple<Ts...>>> {
  using T = std::tuple_element_t<I, std::tuple<Ts...>>;
  using Base = InputStage<T>;
  using Core = JoinCore<Ts...>;

 public:
  JoinInput(Runtime& runtime, std::string name, std::shared_ptr<Core> core, StageOptions options)
      : Base(runtime, std::move(name), StageKind::join, options), core_(std::move(core)) {}

  std::vector<StageBase*> outputs() const override { return {core_->next()}; }
  void on_wired() override {
    if (this->wiring_.upstream) core_->set_branch_name(I, this->wiring_.upstream->name());
    core_->set_forward_holes(this->wiring_.forward_holes);
  }

 protected:
  void run_with(Envelope<T>&& item, typename Base::Visit visit) override {
    this->run_loop(item, visit, [this](Envelope<T>&& part) {
      this->tallies_.add(&Tally::out, std::uint64_t{1});
      return core_->template deposit<I>(std::move(part), true);
    });
  }

  void pass_hole(Envelope<T>&& hole) override {
    Follow<typename Core::Out> ignored = core_->template deposit<I>(std::move(hole), false);
    (void)ignored;
  }

  void on_finish() override { core_->input_finished(); }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace stoke::graph::detail
