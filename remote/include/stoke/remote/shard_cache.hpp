// ShardCache: whole remote objects (tar shards) kept in a local folder within a byte budget, the
// least recently used going first. What a remote dataset reads its shards through when it caches
// them.
//
//   auto client = std::make_shared<remote::HttpClient>();
//   remote::ShardCache cache({.folder = "/scratch/stoke-shards", .budget_bytes = 50ull << 30}, client);
//   remote::ShardCache::Entry shard = cache.fetch(url);   // downloads it unless it is there
//   read(shard.path());                                   // kept while `shard` lives
//
// - The budget holds at every moment: the bytes of the files kept and of the downloads under way
//   never exceed it. An object is made room for before its download starts, by removing the least
//   recently used objects nobody holds (an Entry holds one); when that cannot make room (the
//   object is larger than the budget, or the held ones fill it), fetch() throws naming the
//   object, the budget and what holds the rest.
// - Crash-safe: a download goes to "<file>.part" and is renamed into place only when complete, so a
//   run killed mid-download leaves nothing a restart would take for a shard; a new ShardCache
//   removes the .part files it finds, and takes the complete files as cached (least recently used
//   first by their modification times), checked against the object's size on first use.
// - A failed download (FetchError: a 404, a stall, a shard cut short) leaves no file behind.
// - Files are named "<16 hex digits of a hash of the URL>-<the URL's last path segment>", so one
//   folder serves many datasets and a listing still shows which shard is which.
//
// Thread-safe: any number of threads may fetch at once; two fetches of one object download it
// once (the second waits for the first). An Entry may outlive the cache.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>

#include "stoke/remote/http_client.hpp"
#include "stoke/remote/url.hpp"

namespace stoke::remote {

struct ShardCacheOptions {
  /// Where the objects are kept (created when missing).
  std::filesystem::path folder;
  /// The most bytes the folder holds (kept files and downloads under way); must be > 0.
  std::uint64_t budget_bytes = 0;
  /// Bytes per range request of a download.
  std::size_t chunk_bytes = std::size_t{8} << 20;
  /// How long fetch() waits for room held by others (Entries alive, downloads under way) before it
  /// gives up: 0 (the default) fails at once. A reader that holds its Entries only while it copies
  /// from them (as TarShards does) waits instead of failing when many threads fetch at once.
  std::chrono::milliseconds room_wait{0};
};

struct ShardCacheStats {
  std::uint64_t hits = 0;       ///< fetches answered from the folder
  std::uint64_t misses = 0;     ///< fetches that downloaded
  std::uint64_t prefetched = 0;  ///< objects prefetch() downloaded
  std::uint64_t evictions = 0;  ///< files removed to make room
  std::uint64_t bytes_downloaded = 0;
  std::uint64_t bytes_held = 0;  ///< kept files and downloads under way, now
  std::uint64_t peak_bytes_held = 0;
  double seconds_downloading = 0;  ///< spent in fetch() calls that downloaded, summed over threads
};

class ShardCache {
 public:
  /// Throws std::invalid_argument for an empty folder or a zero budget, std::runtime_error naming
  /// the folder when it cannot be made or read. Removes leftover .part files; takes the complete
  /// files as cached, and removes the least recently used of them while they exceed the budget.
  ShardCache(ShardCacheOptions options, std::shared_ptr<HttpClient> client);
  ~ShardCache();
  ShardCache(const ShardCache&) = delete;
  ShardCache& operator=(const ShardCache&) = delete;

  struct Record;
  struct State;
  /// A cached object, kept in the folder (never removed to make room) while an Entry of it lives.
  class Entry {
   public:
    Entry() = default;
    Entry(std::shared_ptr<State> state, std::shared_ptr<Record> record);
    Entry(Entry&& other) noexcept = default;
    Entry& operator=(Entry&& other) noexcept;
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    ~Entry();

    const std::filesystem::path& path() const;
    std::uint64_t bytes() const;
    /// False for an empty Entry (default-made, moved from, or a prefetch that found no room).
    explicit operator bool() const noexcept { return record_ != nullptr; }

   private:
    void release() noexcept;
    std::shared_ptr<State> state_;
    std::shared_ptr<Record> record_;
  };

  /// The object at `url` in the folder: from there when it is there (and, the first time in this
  /// process, of the object's size), else downloaded first. Throws FetchError naming the URL when
  /// the download fails (nothing is left behind), std::runtime_error naming the URL and the
  /// budget when no room can be made.
  Entry fetch(const RemoteUrl& url);
  /// As fetch, for a read that is not needed yet: downloads only into free room (removes nothing,
  /// waits for nothing) and returns an empty Entry when there is none. A download under way ends
  /// early, leaving nothing behind, when `stop` is requested (it then throws FetchError, status 0).
  /// Not counted as a hit or a miss: the fetch() that later finds the object counts the hit.
  Entry prefetch(const RemoteUrl& url, std::stop_token stop = {});

  /// The file name `url` is kept under.
  static std::string file_name(const RemoteUrl& url);

  ShardCacheStats stats() const;
  const ShardCacheOptions& options() const noexcept { return options_; }

 private:
  // Takes the folder's complete files as cached; removes .part files and what exceeds the budget.
  void adopt_folder();
  enum class Mode : std::uint8_t { fetch, prefetch };
  Entry get(const RemoteUrl& url, Mode mode, const std::stop_token& stop);
  // Makes room for `bytes` more (fetch: removing the least recently used, waiting up to room_wait
  // for held room; prefetch: only free room). The lock is the state's, held.
  bool reserve(std::unique_lock<std::mutex>& lock, std::uint64_t bytes, Mode mode);
  // Downloads `url` (`bytes` long) into record's file through a .part file; the bytes are reserved.
  void download(const RemoteUrl& url, Record& record, const std::stop_token& stop);

  ShardCacheOptions options_;
  std::shared_ptr<HttpClient> client_;
  std::shared_ptr<State> state_;
};

}  // namespace stoke::remote
