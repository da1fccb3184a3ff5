#include "stoke/remote/shard_cache.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

namespace stoke::remote {

namespace fs = std::filesystem;

struct ShardCache::Record {
  enum class Status { downloading, ready };
  std::string name;
  fs::path path;
  std::uint64_t bytes = 0;  // reserved while downloading
  Status status = Status::downloading;
  bool checked = false;  // its size compared with the object's in this process
  int users = 0;         // Entries alive
  std::uint64_t last_use = 0;
  std::optional<std::chrono::steady_clock::time_point> touched{};  // when this process last set the file's time
};

struct ShardCache::State {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::string, std::shared_ptr<Record>> records;  // by file name
  std::uint64_t clock = 0;
  std::uint64_t budget = 0;
  ShardCacheStats stats;

  void hold(std::uint64_t bytes) {
    stats.bytes_held += bytes;
    stats.peak_bytes_held = std::max(stats.peak_bytes_held, stats.bytes_held);
  }
  // Removes `record`'s file and forgets it (the caller holds the lock).
  void drop(const std::shared_ptr<Record>& record) {
    std::error_code ignored;
    fs::remove(record->path, ignored);
    stats.bytes_held -= record->bytes;
    records.erase(record->name);
  }
  // Removes least recently used files nobody holds until `bytes` more fit (`evict` false: removes
  // nothing); false when they cannot.
  bool make_room(std::uint64_t bytes, bool evict = true) {
    if (bytes > budget) return false;
    if (!evict) return stats.bytes_held + bytes <= budget;
    while (stats.bytes_held + bytes > budget) {
      std::shared_ptr<Record> oldest;
      for (const auto& [name, r] : records) {
        if (r->status == Record::Status::ready && r->users == 0 && (!oldest || r->last_use < oldest->last_use)) {
          oldest = r;
        }
      }
      if (!oldest) return false;
      drop(oldest);
      ++stats.evictions;
    }
    return true;
  }
  std::string held_by_users() const {
    std::uint64_t bytes = 0;
    std::size_t count = 0;
    for (const auto& [name, r] : records) {
      if (r->users > 0 || r->status == Record::Status::downloading) {
        bytes += r->bytes;
        ++count;
      }
    }
    return std::to_string(bytes) + " bytes are held by " + std::to_string(count) + " shard" + (count == 1 ? "" : "s") +
           " in use or on the way";
  }
};

namespace {

std::uint64_t fnv1a(std::string_view text) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

constexpr std::string_view part_suffix = ".part";

// `call()` with `lock` released (network work); if it throws, `undo()` runs under the lock first.
template <class Call, class Undo>
auto unlocked(std::unique_lock<std::mutex>& lock, Call&& call, Undo&& undo) {
  lock.unlock();
  try {
    auto result = call();
    lock.lock();
    return result;
  } catch (...) {
    lock.lock();
    undo();
    throw;
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

// ---- Entry

ShardCache::Entry::Entry(std::shared_ptr<State> state, std::shared_ptr<Record> record)
    : state_(std::move(state)), record_(std::move(record)) {}

ShardCache::Entry& ShardCache::Entry::operator=(Entry&& other) noexcept {
  if (this != &other) {
    release();
    state_ = std::move(other.state_);
    record_ = std::move(other.record_);
  }
  return *this;
}

ShardCache::Entry::~Entry() { release(); }

void ShardCache::Entry::release() noexcept {
  if (!record_) return;
  {
    const std::lock_guard lock(state_->mutex);
    --record_->users;
  }
  state_->changed.notify_all();
  record_.reset();
  state_.reset();
}

const fs::path& ShardCache::Entry::path() const {
  if (!record_) throw std::logic_error("ShardCache::Entry::path: an empty entry");
  return record_->path;
}

std::uint64_t ShardCache::Entry::bytes() const { return record_ ? record_->bytes : 0; }

// ---- ShardCache

ShardCache::ShardCache(ShardCacheOptions options, std::shared_ptr<HttpClient> client)
    : options_(std::move(options)), client_(std::move(client)), state_(std::make_shared<State>()) {
  if (options_.folder.empty()) throw std::invalid_argument("remote shard cache: no folder given");
  if (options_.budget_bytes == 0) {
    throw std::invalid_argument("remote shard cache: a budget of 0 bytes keeps nothing (stream the shards instead)");
  }
  if (!client_) throw std::invalid_argument("remote shard cache: no HTTP client");
  if (options_.chunk_bytes == 0) options_.chunk_bytes = ShardCacheOptions{}.chunk_bytes;
  state_->budget = options_.budget_bytes;
  adopt_folder();
}

ShardCache::~ShardCache() = default;

std::string ShardCache::file_name(const RemoteUrl& url) {
  std::string_view text = url.text();
  text = text.substr(0, text.find_first_of("?#"));
  std::string last(text.substr(text.find_last_of('/') + 1));
  for (char& c : last) {
    const bool plain =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!plain) c = '_';
  }
  if (last.empty() || last.ends_with(part_suffix)) last += ".object";
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(url.text())));
  return std::string(hash) + "-" + last;
}

void ShardCache::adopt_folder() {
  std::error_code error;
  fs::create_directories(options_.folder, error);
  if (error) {
    throw std::runtime_error("remote shard cache: cannot make the folder " + options_.folder.string() + ": " +
                             error.message());
  }
  std::vector<std::pair<fs::file_time_type, std::shared_ptr<Record>>> found;
  for (const fs::directory_entry& file : fs::directory_iterator(options_.folder, error)) {
    if (!file.is_regular_file()) continue;
    const std::string name = file.path().filename().string();
    if (name.ends_with(part_suffix)) {  // a download a killed run left half done
      fs::remove(file.path(), error);
      continue;
    }
    auto record = std::make_shared<Record>(
        Record{.name = name, .path = file.path(), .bytes = file.file_size(), .status = Record::Status::ready});
    found.emplace_back(file.last_write_time(), std::move(record));
  }
  if (error) {
    throw std::runtime_error("remote shard cache: cannot read the folder " + options_.folder.string() + ": " +
                             error.message());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  const std::lock_guard lock(state_->mutex);
  for (auto& [time, record] : found) {
    record->last_use = ++state_->clock;
    state_->hold(record->bytes);
    state_->records.emplace(record->name, std::move(record));
  }
  state_->make_room(0);  // a smaller budget than the last run's
}

ShardCache::Entry ShardCache::fetch(const RemoteUrl& url) { return get(url, Mode::fetch, {}); }

ShardCache::Entry ShardCache::prefetch(const RemoteUrl& url, std::stop_token stop) {
  return get(url, Mode::prefetch, stop);
}

ShardCache::Entry ShardCache::get(const RemoteUrl& url, Mode mode, const std::stop_token& stop) {
  const auto start = std::chrono::steady_clock::now();
  const std::string name = file_name(url);
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  for (;;) {
    const auto found = s.records.find(name);
    if (found == s.records.end()) break;
    const std::shared_ptr<Record> record = found->second;
    if (record->status == Record::Status::downloading) {  // another thread's download
      s.changed.wait(lock);
      continue;
    }
    ++record->users;  // held: not removed while its size is checked
    if (mode == Mode::prefetch) return Entry(state_, record);  // checked, counted and touched when fetched
    if (!record->checked) {
      const std::uint64_t bytes = unlocked(
          lock, [&] { return client_->size(url); }, [&] { --record->users; });
      record->checked = true;
      if (bytes != record->bytes) {  // the object changed since it was cached: fetch it again
        --record->users;
        if (record->users > 0) {  // unless others read the old one: their offsets would not fit the new
          throw std::runtime_error("remote shard cache: " + url.text() + " changed on the server (" +
                                   std::to_string(record->bytes) + " -> " + std::to_string(bytes) +
                                   " bytes) while it is being read from " + record->path.string() +
                                   "; start the run again");
        }
        if (s.records.count(name) != 0) s.drop(record);
        continue;
      }
    }
    record->last_use = ++s.clock;
    ++s.stats.hits;
    // The file's time orders the next run's LRU; a reader fetches once per member, so the file is
    // touched at most once a minute rather than on every hit.
    if (const auto now = std::chrono::steady_clock::now();
        !record->touched || now - *record->touched > std::chrono::minutes(1)) {
      record->touched = now;
      std::error_code ignored;
      fs::last_write_time(record->path, fs::file_time_type::clock::now(), ignored);
    }
    return Entry(state_, record);
  }

  // Not here: this thread downloads it; others asking meanwhile wait for it.
  auto record = std::make_shared<Record>(Record{.name = name, .path = options_.folder / name});
  s.records.emplace(name, record);
  const auto forget = [&] {
    s.records.erase(name);
    s.stats.bytes_held -= record->bytes;
    s.changed.notify_all();
  };
  const std::uint64_t bytes = unlocked(
      lock, [&] { return client_->size(url); }, forget);
  if (!reserve(lock, bytes, mode)) {
    forget();
    if (mode == Mode::prefetch) return Entry();
    throw std::runtime_error("remote shard cache: no room for " + url.text() + " (" + std::to_string(bytes) +
                             " bytes) within the budget of " + std::to_string(s.budget) + " bytes in " +
                             options_.folder.string() + ": " + s.held_by_users() +
                             "; raise the cache's budget, or read fewer shards at once");
  }
  record->bytes = bytes;
  s.hold(bytes);
  unlocked(
      lock,
      [&] {
        download(url, *record, stop);
        return true;
      },
      forget);
  record->status = Record::Status::ready;
  record->checked = true;
  record->users = 1;
  record->last_use = ++s.clock;
  if (mode == Mode::prefetch) {
    ++s.stats.prefetched;
  } else {
    ++s.stats.misses;
    s.stats.seconds_downloading += seconds_since(start);
  }
  s.stats.bytes_downloaded += bytes;
  s.changed.notify_all();
  return Entry(state_, record);
}

bool ShardCache::reserve(std::unique_lock<std::mutex>& lock, std::uint64_t bytes, Mode mode) {
  State& s = *state_;
  if (mode == Mode::prefetch) return s.make_room(bytes, /*evict=*/false);
  // Room held by others comes back when their Entries go or their downloads end.
  const auto deadline = std::chrono::steady_clock::now() + options_.room_wait;
  while (!s.make_room(bytes)) {
    if (bytes > s.budget || std::chrono::steady_clock::now() >= deadline) return false;
    s.changed.wait_until(lock, deadline);
  }
  return true;
}

void ShardCache::download(const RemoteUrl& url, Record& record, const std::stop_token& stop) {
  const fs::path part = record.path.string() + std::string(part_suffix);
  std::FILE* file = std::fopen(part.c_str(), "wb");
  if (file == nullptr) {
    throw std::runtime_error("remote shard cache: cannot write " + part.string() + ": " +
                             std::error_code(errno, std::generic_category()).message());
  }
  const auto cannot_write = [&] {
    return std::runtime_error("remote shard cache: cannot write " + part.string() + ": " +
                              std::error_code(errno, std::generic_category()).message());
  };
  try {
    client_->read_chunks(url, record.bytes, options_.chunk_bytes, [&](std::span<const std::byte> chunk) {
      if (stop.stop_requested()) throw FetchError(url.text() + ": download stopped", 0);
      if (std::fwrite(chunk.data(), 1, chunk.size(), file) != chunk.size()) throw cannot_write();
    });
    // On the disk before the name says it is complete: a crash then leaves the .part, never half a shard.
    if (std::fflush(file) != 0 || ::fsync(::fileno(file)) != 0) throw cannot_write();
    std::FILE* closing = std::exchange(file, nullptr);
    if (std::fclose(closing) != 0) throw cannot_write();
  } catch (...) {  // a failed or stopped download leaves nothing behind
    if (file != nullptr) std::fclose(file);
    std::error_code ignored;
    fs::remove(part, ignored);
    throw;
  }
  std::error_code error;
  fs::rename(part, record.path, error);
  if (error) {
    fs::remove(part, error);
    throw std::runtime_error("remote shard cache: cannot rename " + part.string() + " into place: " + error.message());
  }
}

ShardCacheStats ShardCache::stats() const {
  const std::lock_guard lock(state_->mutex);
  return state_->stats;
}

}  // namespace stoke::remote
