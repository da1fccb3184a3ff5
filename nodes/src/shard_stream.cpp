#include "shard_stream.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <stoke/remote/http_client.hpp>
#include <stoke/remote/url.hpp>

namespace stoke::nodes::detail {

ShardStream::ShardStream(std::shared_ptr<remote::HttpClient> client, std::vector<Shard> shards, std::uint64_t budget,
                         int downloads)
    : client_(std::move(client)), budget_(budget) {
  slots_.reserve(shards.size());
  for (Shard& shard : shards) slots_.push_back(Slot{.shard = std::move(shard)});
  stats_.budget = budget;
  for (int d = 0; d < std::max(1, downloads); ++d) {
    downloaders_.emplace_back([this](const std::stop_token& stop) { download_loop(stop); });
  }
}

ShardStream::~ShardStream() {
  for (std::jthread& downloader : downloaders_) downloader.request_stop();
  changed_.notify_all();
  downloaders_.clear();  // joins
}

void ShardStream::plan(const std::vector<std::pair<std::size_t, std::uint64_t>>& reads) {
  {
    const std::lock_guard lock(mutex_);
    for (const auto& [shard, count] : reads) {
      Slot& slot = slots_.at(shard);
      if (!slot.shard.url || slot.shard.bytes > budget_ || count == 0) continue;
      slot.plans.push_back(count);
      queue_.push_back({shard, slot.plans_done + slot.plans.size() - 1});
    }
  }
  changed_.notify_all();
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
    if (slot.plans.empty() || --slot.plans.front() > 0) return;  // unplanned, or reads to come
    slot.plans.pop_front();
    ++slot.plans_done;
    if (slot.state == State::held) release(slot);
  }
  changed_.notify_all();  // room, or a later plan's turn
}

void ShardStream::release(Slot& slot) {
  slot.bytes.reset();  // samples that view it keep it alive until they are decoded
  slot.state = State::absent;
  stats_.held_bytes -= slot.shard.bytes;
}

ShardStream::Head ShardStream::head() const {
  const Queued& next = queue_.front();
  const Slot& slot = slots_[next.shard];
  if (next.plan < slot.plans_done) return Head::stale;  // its reads are over
  if (next.plan > slot.plans_done) return Head::wait;   // an earlier plan still reads the shard
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
    // it: wait for plan() or done().
    if (!changed_.wait(lock, stop, [&] { return !queue_.empty() && head() != Head::wait; })) return std::nullopt;
  }
}

void ShardStream::download_loop(const std::stop_token& stop) {
  while (const std::optional<Queued> next = next_download(stop)) {
    const Shard& what = slots_[next->shard].shard;  // url and bytes never change
    std::shared_ptr<std::vector<std::byte>> bytes;
    try {
      bytes = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(what.bytes));
      std::size_t at = 0;
      client_->read_chunks(*what.url, what.bytes, std::size_t{8} << 20, [&](std::span<const std::byte> chunk) {
        if (stop.stop_requested()) throw remote::FetchError(what.url->text() + ": download stopped", 0);
        if (chunk.size() > bytes->size() - at) throw remote::FetchError(what.url->text() + ": longer than its size", 0);
        std::memcpy(bytes->data() + at, chunk.data(), chunk.size());
        at += chunk.size();
      });
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
      } else if (slot.plans_done == next->plan) {  // else its reads ended while it came
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
