// ShardStream: whole remote shards downloaded into memory in the order the reads will need them,
// within a byte budget, and let go when their last planned read is done (private to
// stoke::nodes; RemoteShards owns one for a dataset opened with a window and no cache folder).
//
//   plan(reads)     coming reads, shard by shard in the order of their first read (an epoch's):
//                   the downloaders fetch the shards in that order while the budget has room.
//                   The plan holds while the handle it returns lives; dropping it says that its
//                   reads not yet made will not come (a pipeline stopped early)
//   held(s)         shard s's bytes when held (waits while it is on its way); null otherwise:
//                   the caller reads with a range request instead
//   done(s)         one planned read of s is over
//
// Plans queue up (a source tells an epoch ahead): a shard's reads count against its oldest plan.
// When that plan's reads are done the shard is let go -- or kept for its next plan when that
// comes within the budget's worth of queued shards (the last shards of an epoch are often among
// the first of the next). Nothing evicts a shard that still has planned reads: when the budget is
// full the downloaders wait for done() to free room, and reads of shards not held go to the
// server one range at a time, so the stream never thrashes. Besides the budget it keeps up to two
// spare buffers: a buffer goes back there when the last sample viewing it is gone, and the next
// download reuses it (a new 8 MB buffer costs its page faults and zeroing: a tenth of a
// millisecond of CPU per photo).
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

/// Thread-safe. The destructor stops the downloads (one under way ends at its next chunk); plan
/// handles may outlive it.
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

  /// Adds a plan: (shard, how many reads), in the order of each shard's first read. It holds while
  /// the returned handle lives.
  std::shared_ptr<const void> plan(const std::vector<std::pair<std::size_t, std::uint64_t>>& reads);
  /// Shard s's bytes when held, after waiting for a download under way; null when not held.
  Buffer held(std::size_t shard);
  /// One planned read of `shard` is over (read or failed).
  void done(std::size_t shard);

  ShardStreamStats stats() const;

 private:
  enum class State : std::uint8_t { absent, downloading, held };
  struct Planned {
    std::uint64_t plan = 0;   // its id
    std::uint64_t reads = 0;  // still to come
  };
  struct Slot {
    Shard shard;
    State state = State::absent;  // of the bytes for the oldest plan
    std::deque<Planned> plans{};  // oldest first
    Buffer bytes{};
  };
  struct Queued {
    std::size_t shard = 0;
    std::uint64_t plan = 0;
  };
  enum class Head : std::uint8_t { stale, take, wait };

  struct Shared;  // what plan handles reach after the stream is gone: a weak link to it
  struct Spares;  // buffers whose samples are gone, for the next downloads
  // A buffer of `bytes` bytes for a download: a spare one when there is, else a new one.
  std::shared_ptr<std::vector<std::byte>> buffer(std::uint64_t bytes) const;
  void cancel(std::uint64_t plan);
  Head head() const;                            // what to do with queue_.front(), with mutex_ held
  void oldest_plan_over(std::size_t shard);     // with mutex_ held
  bool queued_soon(const Queued& entry) const;  // with mutex_ held
  void download_loop(const std::stop_token& stop);
  std::optional<Queued> next_download(const std::stop_token& stop);  // with its room taken; nullopt: stopped
  void release(Slot& slot);                                          // with mutex_ held

  std::shared_ptr<remote::HttpClient> client_;
  std::uint64_t budget_;
  mutable std::mutex mutex_;
  std::condition_variable_any changed_;
  std::vector<Slot> slots_;
  std::deque<Queued> queue_;
  std::uint64_t next_plan_ = 0;
  ShardStreamStats stats_;
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<Spares> spares_;
  std::vector<std::jthread> downloaders_;  // last: stopped and joined first
};

}  // namespace stoke::nodes::detail
