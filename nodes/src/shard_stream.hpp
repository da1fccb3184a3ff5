// ShardStream: whole remote shards downloaded into memory in the order the reads will need them,
// within a byte budget, and let go when their last planned read is done (private to
// stoke::nodes; RemoteShards owns one when TarShardsOptions::memory_bytes > 0 and there is no
// cache folder).
//
//   plan(reads)     the epoch's coming reads, shard by shard in the order of their first read:
//                   the downloaders fetch them in that order while the budget has room
//   held(s)         shard s's bytes when held (waits while it is on its way); null otherwise:
//                   the caller reads with a range request instead
//   done(s)         one planned read of s is over; at the last one s is let go
//
// Plans queue up (one per epoch): a shard's reads count against its oldest plan, and it is let go
// when that plan's reads are done, to be downloaded again for the next plan in that plan's order.
// A shard is never downloaded twice for one plan, and nothing evicts a shard that still has
// planned reads: when the budget is full the downloaders wait for done() to free room, and reads
// of shards not held go to the server one range at a time, so the stream never thrashes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace stoke::remote {
class HttpClient;
class RemoteUrl;
}  // namespace stoke::remote

namespace stoke::nodes::detail {

/// What a ShardStream has done since it was made.
struct ShardStreamStats {
  std::uint64_t shards = 0;      ///< shards downloaded whole
  std::uint64_t failed = 0;      ///< downloads that failed (their reads went to range requests)
  std::uint64_t held_bytes = 0;  ///< bytes held now (downloads under way included)
  std::uint64_t peak_bytes = 0;
  std::uint64_t budget = 0;
};

/// Thread-safe. The destructor stops the downloads (one under way ends at its next chunk).
class ShardStream {
 public:
  struct Shard {
    std::shared_ptr<const remote::RemoteUrl> url;  ///< null: a local shard, never streamed
    std::uint64_t bytes = 0;
  };
  using Buffer = std::shared_ptr<const std::vector<std::byte>>;

  /// `downloads` shards at a time. A shard larger than the budget is never streamed.
  ShardStream(std::shared_ptr<remote::HttpClient> client, std::vector<Shard> shards, std::uint64_t budget,
              int downloads = 2);
  ~ShardStream();
  ShardStream(const ShardStream&) = delete;
  ShardStream& operator=(const ShardStream&) = delete;

  /// Adds planned reads: (shard, how many reads), in the order of each shard's first read.
  void plan(const std::vector<std::pair<std::size_t, std::uint64_t>>& reads);
  /// Shard s's bytes when held, after waiting for a download under way; null when not held.
  Buffer held(std::size_t shard);
  /// One planned read of `shard` is over (read or failed).
  void done(std::size_t shard);

  ShardStreamStats stats() const;

 private:
  enum class State : std::uint8_t { absent, downloading, held };
  struct Slot {
    Shard shard;
    State state = State::absent;        // of the bytes for the oldest plan
    std::deque<std::uint64_t> plans{};  // reads still to come, per plan, oldest first
    std::uint64_t plans_done = 0;       // the number of the oldest plan in `plans`
    Buffer bytes{};
  };
  struct Queued {
    std::size_t shard = 0;
    std::uint64_t plan = 0;  // the shard's plan number it is for
  };
  enum class Head : std::uint8_t { stale, take, wait };
  Head head() const;  // what to do with queue_.front(), with mutex_ held
  void download_loop(const std::stop_token& stop);
  // The next queued shard to download, with its room taken; nullopt when stopped.
  std::optional<Queued> next_download(const std::stop_token& stop);
  void release(Slot& slot);  // with mutex_ held

  std::shared_ptr<remote::HttpClient> client_;
  std::uint64_t budget_;
  mutable std::mutex mutex_;
  std::condition_variable_any changed_;
  std::vector<Slot> slots_;
  std::deque<Queued> queue_;
  ShardStreamStats stats_;
  std::vector<std::jthread> downloaders_;  // last: stopped and joined first
};

}  // namespace stoke::nodes::detail
