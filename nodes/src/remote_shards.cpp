#include "remote_shards.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <stoke/remote/http_client.hpp>
#include <stoke/remote/shard_cache.hpp>
#include <stoke/remote/url.hpp>
#include <string>
#include <utility>

#include "mapped_file.hpp"

namespace stoke::nodes::detail {

namespace fs = std::filesystem;

namespace {

// A file in the temporary folder, removed with the object.
class TemporaryFile {
 public:
  TemporaryFile() {
    std::string name = (fs::temp_directory_path() / "stoke-shard-XXXXXX").string();
    fd_ = ::mkstemp(name.data());
    if (fd_ < 0) {
      throw std::runtime_error("TarShards: cannot make a temporary file in " + fs::temp_directory_path().string() +
                               ": " + std::strerror(errno));
    }
    path_ = name;
  }
  ~TemporaryFile() {
    ::close(fd_);
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  const fs::path& path() const noexcept { return path_; }
  void write(std::span<const std::byte> bytes) const {
    while (!bytes.empty()) {
      const ssize_t written = ::write(fd_, bytes.data(), bytes.size());
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        throw std::runtime_error("TarShards: cannot write " + path_.string() + ": " + std::strerror(errno));
      }
      bytes = bytes.subspan(static_cast<std::size_t>(written));
    }
  }

 private:
  int fd_ = -1;
  fs::path path_;
};

// out.size() bytes of the file `path` from `offset` (a cached shard: complete, never changed).
void read_file_at(const fs::path& path, std::uint64_t offset, std::span<std::byte> out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("TarShards: cannot open the cached shard " + path.string() + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = n == 0 ? "it ends first" : std::strerror(errno);
      ::close(fd);
      throw std::runtime_error("TarShards: cannot read " + std::to_string(out.size()) + " bytes at byte " +
                               std::to_string(offset) + " of the cached shard " + path.string() + ": " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
}

// Adds the time from its making to its end to `total` (nanoseconds).
class WaitTimer {
 public:
  explicit WaitTimer(std::atomic<std::uint64_t>& total) : total_(total) {}
  ~WaitTimer() {
    const auto spent = std::chrono::steady_clock::now() - start_;
    total_ += static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count());
  }
  WaitTimer(const WaitTimer&) = delete;
  WaitTimer& operator=(const WaitTimer&) = delete;

 private:
  std::atomic<std::uint64_t>& total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace

RemoteShards::RemoteShards(const TarShardsOptions& options)
    : client_(std::make_shared<remote::HttpClient>(
          remote::FetchOptions{.retries = options.retries, .stall_limit = options.stall_limit})) {
  if (options.cache_dir.empty() != (options.cache_bytes == 0)) {
    throw std::invalid_argument(
        "TarShards: a shard cache needs both a folder and a byte budget (cache_dir and cache_bytes); give neither "
        "to read each member with a range request");
  }
  if (options.cache_dir.empty()) {
    memory_bytes_ = options.memory_bytes;
    return;
  }
  cache_ = std::make_unique<remote::ShardCache>(
      remote::ShardCacheOptions{.folder = options.cache_dir,
                                .budget_bytes = options.cache_bytes,
                                // Readers hold a shard only while they copy a member out of it.
                                .room_wait = std::chrono::minutes(10)},
      client_);
}

RemoteShards::~RemoteShards() = default;

std::uint64_t RemoteShards::budget() const noexcept { return cache_ ? cache_->options().budget_bytes : 0; }

void RemoteShards::with_whole(const remote::RemoteUrl& url, std::uint64_t size,
                              const std::function<void(std::span<const std::byte>)>& use) const {
  if (cache_) {
    const remote::ShardCache::Entry shard = cache_->fetch(url);
    use(MappedFile(shard.path()).bytes());
    return;
  }
  const TemporaryFile file;
  client_->read_chunks(url, size, std::size_t{8} << 20, [&](std::span<const std::byte> chunk) { file.write(chunk); });
  use(MappedFile(file.path()).bytes());
}

void RemoteShards::read(const remote::RemoteUrl& url, std::uint64_t offset, std::span<std::byte> out) const {
  if (!cache_) {
    const WaitTimer timer(wait_ns_);
    client_->read_into(url, offset, out);  // one range request
    return;
  }
  const remote::ShardCache::Entry shard = [&] {
    const WaitTimer timer(wait_ns_);
    return cache_->fetch(url);
  }();
  read_file_at(shard.path(), offset, out);  // held (not removed) until the copy is done
}

void RemoteShards::prefetch(std::vector<std::shared_ptr<const remote::RemoteUrl>> shards) {
  if (!cache_ || shards.empty()) return;
  prefetcher_ = std::jthread([this, shards = std::move(shards)](const std::stop_token& stop) {
    for (const std::shared_ptr<const remote::RemoteUrl>& url : shards) {
      if (stop.stop_requested()) return;
      try {
        if (!cache_->prefetch(*url, stop)) return;  // the folder is full: reads fetch the rest
      } catch (const std::exception&) {
        // A shard that cannot be fetched now fails the read that needs it, naming it there.
      }
    }
  });
}

void RemoteShards::start_stream(std::vector<ShardStream::Shard> shards) {
  if (cache_ || memory_bytes_ == 0) return;
  stream_ = std::make_unique<ShardStream>(client_, std::move(shards), memory_bytes_);
}

std::shared_ptr<const void> RemoteShards::plan(const std::vector<std::pair<std::size_t, std::uint64_t>>& reads) {
  return stream_ ? stream_->plan(reads) : nullptr;
}

ShardStream::Buffer RemoteShards::held(std::size_t shard) const {
  if (!stream_) return nullptr;
  const WaitTimer timer(wait_ns_);
  return stream_->held(shard);
}

void RemoteShards::done(std::size_t shard) const {
  if (stream_) stream_->done(shard);
}

NetworkStats RemoteShards::stats() const {
  const remote::FetchStats fetched = client_->stats();
  NetworkStats stats{.requests = fetched.requests,
                     .retries = fetched.retries,
                     .bytes = fetched.bytes,
                     .wait_seconds = static_cast<double>(wait_ns_.load()) * 1e-9};
  if (cache_) {
    const remote::ShardCacheStats cached = cache_->stats();
    stats.cached = true;
    stats.cache_hits = cached.hits;
    stats.cache_misses = cached.misses;
    stats.cache_prefetched = cached.prefetched;
    stats.cache_evictions = cached.evictions;
    stats.cache_bytes = cached.bytes_held;
    stats.cache_peak_bytes = cached.peak_bytes_held;
    stats.cache_budget = cache_->options().budget_bytes;
  }
  if (stream_) {
    const ShardStreamStats streamed = stream_->stats();
    stats.stream_budget = streamed.budget;
    stats.stream_shards = streamed.shards;
    stats.stream_peak_bytes = streamed.peak_bytes;
  }
  return stats;
}

}  // namespace stoke::nodes::detail
