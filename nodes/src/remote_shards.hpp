// RemoteShards: how TarShards reads the shards it was given as URLs (private to stoke::nodes) --
// each member with one range request, or from whole shards streamed into memory in the order of
// the coming reads (ShardStream), or, given a cache folder, from whole shards kept there
// (remote::ShardCache), downloaded ahead of the reads while the folder has free room.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "shard_stream.hpp"
#include "stoke/nodes/dataset.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace stoke::remote {
class HttpClient;
class RemoteUrl;
class ShardCache;
}  // namespace stoke::remote

namespace stoke::nodes::detail {

/// Thread-safe. The destructor stops the prefetch: a download under way ends early and leaves nothing.
class RemoteShards {
 public:
  /// Throws std::invalid_argument for a cache folder without a budget (or a budget without a
  /// folder), std::runtime_error naming the folder when it cannot be made.
  explicit RemoteShards(const TarShardsOptions& options);
  ~RemoteShards();
  RemoteShards(const RemoteShards&) = delete;
  RemoteShards& operator=(const RemoteShards&) = delete;

  remote::HttpClient& client() const noexcept { return *client_; }
  bool caching() const noexcept { return cache_ != nullptr; }
  /// The largest shard the cache can take (its budget); 0 without a cache.
  std::uint64_t budget() const noexcept;

  /// The whole shard handed to `use`: from the cache (downloaded into it when missing), or from one
  /// download into a temporary file removed afterwards. Throws remote::FetchError naming the URL.
  void with_whole(const remote::RemoteUrl& url, std::uint64_t size,
                  const std::function<void(std::span<const std::byte>)>& use) const;
  /// Bytes [offset, offset + out.size()) of the shard: one range request, or a read of the cached
  /// shard (downloaded first when it is not there). Throws remote::FetchError naming the URL.
  void read(const remote::RemoteUrl& url, std::uint64_t offset, std::span<std::byte> out) const;

  /// Downloads `shards` into the cache in this order, in the background, while the folder has
  /// free room (it removes nothing to make room, and stops at the first shard that does not fit).
  /// Nothing without a cache.
  void prefetch(std::vector<std::shared_ptr<const remote::RemoteUrl>> shards);

  /// Without a cache and with a memory budget: streams whole shards into memory as plan() says
  /// (ShardStream). `shards` by the dataset's shard index (a null URL: a local shard).
  void start_stream(std::vector<ShardStream::Shard> shards);
  /// The coming reads, (shard, reads) in the order of each shard's first, while the handle lives
  /// (ShardStream::plan); nothing (null) when not streaming.
  std::shared_ptr<const void> plan(const std::vector<std::pair<std::size_t, std::uint64_t>>& reads);
  /// The whole shard when streamed into memory (after waiting for its download); null otherwise.
  ShardStream::Buffer held(std::size_t shard) const;
  /// A read of `shard` is over (whatever became of it).
  void done(std::size_t shard) const;

  NetworkStats stats() const;

 private:
  std::shared_ptr<remote::HttpClient> client_;
  std::unique_ptr<remote::ShardCache> cache_;
  std::uint64_t memory_bytes_ = 0;
  std::unique_ptr<ShardStream> stream_;
  mutable std::atomic<std::uint64_t> wait_ns_{0};
  std::jthread prefetcher_;  // last: stopped and joined before the cache goes
};

}  // namespace stoke::nodes::detail
