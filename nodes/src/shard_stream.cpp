#include "shard_stream.hpp"

#include <algorithm>
#include <exception>
#include <stoke/remote/http_client.hpp>
#include <stoke/remote/url.hpp>

namespace stoke::nodes::detail {

struct ShardStream::Shared {
  std::mutex mutex;
  ShardStream* stream = nullptr;  // null once the stream is gone
};

struct ShardStream::Spares {
  static constexpr std::size_t most = 2;
  std::mutex mutex;
  std::vector<std::unique_ptr<std::vector<std::byte>>> free;
};

std::shared_ptr<std::vector<std::byte>> ShardStream::buffer(std::uint64_t bytes) const {
  std::unique_ptr<std::vector<std::byte>> spare;
  {
    const std::lock_guard lock(spares_->mutex);
    if (!spares_->free.empty()) {
      spare = std::move(spares_->free.back());
      spares_->free.pop_back();
    }
  }
  if (!spare) spare = std::make_unique<std::vector<std::byte>>();
  spare->resize(static_cast<std::size_t>(bytes));  // shards are alike in size: little or nothing to zero
  // When the last sample viewing it is gone, back to the spares (or freed when there are enough).
  return {spare.release(), [spares = spares_](std::vector<std::byte>* used) {
            std::unique_ptr<std::vector<std::byte>> owned(used);
            const std::lock_guard lock(spares->mutex);
            if (spares->free.size() < Spares::most) spares->free.push_back(std::move(owned));
          }};
}

ShardStream::ShardStream(std::shared_ptr<remote::HttpClient> client, std::vector<Shard> shards, std::uint64_t budget,
                         int downloads)
    : client_(std::move(client)),
      budget_(budget),
      shared_(std::make_shared<Shared>()),
      spares_(std::make_shared<Spares>()) {
  shared_->stream = this;
  slots_.reserve(shards.size());
  for (Shard& shard : shards) slots_.push_back(Slot{.shard = std::move(shard)});
  stats_.budget = budget;
  for (int d = 0; d < std::max(1, downloads); ++d) {
    downloaders_.emplace_back([this](const std::stop_token& stop) { download_loop(stop); });
  }
}

ShardStream::~ShardStream() {
  {
    const std::lock_guard lock(shared_->mutex);
    shared_->stream = nullptr;
  }
  for (std::jthread& downloader : downloaders_) downloader.request_stop();
  changed_.notify_all();
  downloaders_.clear();  // joins
}

std::shared_ptr<const void> ShardStream::plan(const std::vector<std::pair<std::size_t, std::uint64_t>>& reads) {
  std::uint64_t id = 0;
  {
    const std::lock_guard lock(mutex_);
    id = next_plan_++;
    for (const auto& [shard, count] : reads) {
      Slot& slot = slots_.at(shard);
      if (!slot.shard.url || slot.shard.bytes > budget_ || count == 0) continue;
      slot.plans.push_back({id, count});
      queue_.push_back({shard, id});
    }
  }
  changed_.notify_all();
  // The handle: its end cancels what is left of the plan, if the stream is still there.
  return {new std::uint64_t(id), [shared = shared_](const std::uint64_t* plan) {
            {
              const std::lock_guard lock(shared->mutex);
              if (shared->stream) shared->stream->cancel(*plan);
            }
            delete plan;
          }};
}

void ShardStream::cancel(std::uint64_t plan) {
  {
    const std::lock_guard lock(mutex_);
    for (std::size_t s = 0; s < slots_.size(); ++s) {
      std::deque<Planned>& plans = slots_[s].plans;
      const auto it = std::find_if(plans.begin(), plans.end(), [&](const Planned& p) { return p.plan == plan; });
      if (it == plans.end()) continue;
      if (it != plans.begin()) {
        plans.erase(it);
        continue;
      }
      plans.pop_front();
      oldest_plan_over(s);
    }
  }
  changed_.notify_all();  // its queued shards are stale now
}

ShardStream::Buffer ShardStream::held(std::size_t shard) {
  std::unique_lock lock(mutex_);
  Slot& slot = slots_.at(shard);
  changed_.wait(lock, [&] { return slot.state != State::downloading; });
  return slot.state == State::held ? slot.bytes : nullptr;
}

void ShardStream::done(std::size_t shard) {
  {
    const std::lock_guard lock(mutex_);
    Slot& slot = slots_.at(shard);
    if (slot.plans.empty() || --slot.plans.front().reads > 0) return;  // unplanned, or reads to come
    slot.plans.pop_front();
    oldest_plan_over(shard);
  }
  changed_.notify_all();  // room, or a later plan's turn
}

void ShardStream::oldest_plan_over(std::size_t shard) {
  Slot& slot = slots_[shard];
  if (slot.state != State::held) return;  // a download under way checks its plan when it ends
  // Kept for the next plan when that one's download would come soon anyway.
  if (!slot.plans.empty() && queued_soon({shard, slot.plans.front().plan})) return;
  release(slot);
}

bool ShardStream::queued_soon(const Queued& entry) const {
  // Soon: the shards to download before that entry's turn fit beside those held now (this one
  // included), so keeping it takes no room the downloads ahead of it need.
  std::uint64_t bytes = stats_.held_bytes;
  for (const Queued& queued : queue_) {
    if (queued.shard == entry.shard && queued.plan == entry.plan) return true;
    if (slots_[queued.shard].state == State::absent) bytes += slots_[queued.shard].shard.bytes;
    if (bytes > budget_) return false;
  }
  return false;
}

void ShardStream::release(Slot& slot) {
  slot.bytes.reset();  // samples that view it keep it alive until they are decoded
  slot.state = State::absent;
  stats_.held_bytes -= slot.shard.bytes;
}

ShardStream::Head ShardStream::head() const {
  const Queued& next = queue_.front();
  const Slot& slot = slots_[next.shard];
  const auto plan =
      std::find_if(slot.plans.begin(), slot.plans.end(), [&](const Planned& p) { return p.plan == next.plan; });
  if (plan == slot.plans.end()) return Head::stale;     // its reads are over, or it was cancelled
  if (plan != slot.plans.begin()) return Head::wait;    // an earlier plan still reads the shard
  if (slot.state != State::absent) return Head::stale;  // held or on its way for this plan
  return stats_.held_bytes + slot.shard.bytes <= budget_ ? Head::take : Head::wait;
}

std::optional<ShardStream::Queued> ShardStream::next_download(const std::stop_token& stop) {
  std::unique_lock lock(mutex_);
  while (true) {
    while (!queue_.empty() && head() == Head::stale) queue_.pop_front();
    if (!queue_.empty() && head() == Head::take) {
      const Queued next = queue_.front();
      queue_.pop_front();
      slots_[next.shard].state = State::downloading;
      stats_.held_bytes += slots_[next.shard].shard.bytes;
      stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.held_bytes);
      return next;
    }
    // Nothing to fetch, no room until reads finish shards, or a shard's earlier plan still reading
    // it: wait for plan(), done() or a cancel.
    if (!changed_.wait(lock, stop, [&] { return !queue_.empty() && head() != Head::wait; })) return std::nullopt;
  }
}

void ShardStream::download_loop(const std::stop_token& stop) {
  constexpr std::uint64_t chunk = std::uint64_t{8} << 20;  // a stop is seen between chunks
  while (const std::optional<Queued> next = next_download(stop)) {
    const Shard& what = slots_[next->shard].shard;  // url and bytes never change
    std::shared_ptr<std::vector<std::byte>> bytes;
    try {
      bytes = buffer(what.bytes);
      for (std::uint64_t at = 0; at < what.bytes && !stop.stop_requested(); at += chunk) {
        const auto n = static_cast<std::size_t>(std::min(chunk, what.bytes - at));
        client_->read_into(*what.url, at, std::span(*bytes).subspan(static_cast<std::size_t>(at), n));
      }
      if (stop.stop_requested()) bytes.reset();
    } catch (const std::exception&) {
      bytes.reset();  // its reads go to range requests, which name the failure
    }
    {
      const std::lock_guard lock(mutex_);
      Slot& slot = slots_[next->shard];
      slot.state = State::absent;
      stats_.held_bytes -= what.bytes;
      if (!bytes) {
        ++stats_.failed;
      } else if (!slot.plans.empty() && slot.plans.front().plan == next->plan) {  // else its reads ended meanwhile
        slot.bytes = std::move(bytes);
        slot.state = State::held;
        stats_.held_bytes += what.bytes;
        ++stats_.shards;
      }
    }
    changed_.notify_all();
  }
}

ShardStreamStats ShardStream::stats() const {
  const std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace stoke::nodes::detail
