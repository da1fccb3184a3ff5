// Helpers shared by the stoke::graph tests: an item type that counts its live owners, a probe
// that counts concurrent calls, waiting with a safety deadline, and lookups in stats.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "stoke/graph/graph.hpp"

namespace stoke::graph::test {

/// Only there to keep a broken pipeline from hanging the suite; never used to judge speed.
inline constexpr std::chrono::seconds safety_deadline{60};

/// Counts live owners (see Tracked) and remembers the highest count. A "watch" records the
/// highest count reached by increments that started after start_watch().
class LiveCounter {
 public:
  void add() noexcept {
    const bool watching = watching_.load();  // read first: the increment is then after the watch began
    const long now = live_.fetch_add(1) + 1;
    raise_to(peak_, now);
    if (watching) raise_to(watched_peak_, now);
  }
  void remove() noexcept { live_.fetch_sub(1); }

  long live() const noexcept { return live_.load(); }
  long peak() const noexcept { return peak_.load(); }

  void start_watch() noexcept {
    watched_peak_.store(0);
    watching_.store(true);
  }
  long watched_peak() const noexcept { return watched_peak_.load(); }

 private:
  static void raise_to(std::atomic<long>& target, long value) noexcept {
    long seen = target.load();
    while (value > seen && !target.compare_exchange_weak(seen, value)) {
    }
  }

  std::atomic<long> live_{0};
  std::atomic<long> peak_{0};
  std::atomic<bool> watching_{false};
  std::atomic<long> watched_peak_{0};
};

/// A move-only item that counts itself in a LiveCounter while it owns its value. A moved-from
/// Tracked owns nothing and does not count, so LiveCounter::live() is the number of items alive
/// in the pipeline (plus any the test itself holds).
class Tracked {
 public:
  Tracked(LiveCounter& counter, std::uint64_t value) : counter_(&counter), value_(value) { counter_->add(); }
  Tracked(Tracked&& other) noexcept : counter_(std::exchange(other.counter_, nullptr)), value_(other.value_) {}
  Tracked& operator=(Tracked&& other) noexcept {
    if (this != &other) {
      release();
      counter_ = std::exchange(other.counter_, nullptr);
      value_ = other.value_;
    }
    return *this;
  }
  Tracked(const Tracked&) = delete;
  Tracked& operator=(const Tracked&) = delete;
  ~Tracked() { release(); }

  std::uint64_t value() const noexcept { return value_; }
  void set_value(std::uint64_t value) noexcept { value_ = value; }
  bool owns() const noexcept { return counter_ != nullptr; }

 private:
  void release() noexcept {
    if (counter_ != nullptr) {
      counter_->remove();
      counter_ = nullptr;
    }
  }

  LiveCounter* counter_;
  std::uint64_t value_;
};

/// Counts calls running at once. Use one Scope per body call. Like LiveCounter, a watch records
/// the highest count reached by calls that entered after start_watch().
class ConcurrencyProbe {
 public:
  class Scope {
   public:
    explicit Scope(ConcurrencyProbe& probe) noexcept : probe_(probe) { probe_.enter(); }
    ~Scope() { probe_.current_.fetch_sub(1); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ConcurrencyProbe& probe_;
  };

  int current() const noexcept { return current_.load(); }
  int peak() const noexcept { return peak_.load(); }
  std::uint64_t calls() const noexcept { return calls_.load(); }

  void start_watch() noexcept {
    watched_peak_.store(0);
    watched_calls_.store(0);
    watching_.store(true);
  }
  int watched_peak() const noexcept { return watched_peak_.load(); }
  std::uint64_t watched_calls() const noexcept { return watched_calls_.load(); }

 private:
  void enter() noexcept {
    const bool watching = watching_.load();  // read first: the call then entered after the watch began
    const int now = current_.fetch_add(1) + 1;
    calls_.fetch_add(1);
    raise_to(peak_, now);
    if (watching) {
      raise_to(watched_peak_, now);
      watched_calls_.fetch_add(1);
    }
  }
  static void raise_to(std::atomic<int>& target, int value) noexcept {
    int seen = target.load();
    while (value > seen && !target.compare_exchange_weak(seen, value)) {
    }
  }

  std::atomic<int> current_{0};
  std::atomic<int> peak_{0};
  std::atomic<std::uint64_t> calls_{0};
  std::atomic<bool> watching_{false};
  std::atomic<int> watched_peak_{0};
  std::atomic<std::uint64_t> watched_calls_{0};
};

/// A gate that body calls wait at until the test opens it (or the safety deadline passes).
class Gate {
 public:
  void open() noexcept { open_.store(true); }
  bool is_open() const noexcept { return open_.load(); }
  void wait() const {
    const auto deadline = std::chrono::steady_clock::now() + safety_deadline;
    while (!open_.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  std::atomic<bool> open_{false};
};

/// The exception the tests inject into stage bodies.
class InjectedFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Polls `done` until it holds or the safety deadline passes; returns whether it held.
template <class Predicate>
bool wait_until(Predicate done) {
  const auto deadline = std::chrono::steady_clock::now() + safety_deadline;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

inline void sleep_us(int microseconds) { std::this_thread::sleep_for(std::chrono::microseconds(microseconds)); }

/// The stage called `name` in a stats snapshot; throws (failing the test) when there is none.
inline const StageStats& stage_named(const std::vector<StageStats>& stages, std::string_view name) {
  for (const auto& stage : stages) {
    if (stage.name == name) return stage;
  }
  throw std::out_of_range("no stage named '" + std::string(name) + "' in the stats");
}

inline ::testing::AssertionResult contains(std::string_view haystack, std::string_view needle) {
  if (haystack.find(needle) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << '"' << haystack << "\" does not contain \"" << needle << '"';
}

inline std::string read_text(const std::filesystem::path& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) return {};
  std::string text(static_cast<std::size_t>(size), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

/// Number of Chrome trace complete events ("ph":"X", any spacing around the colon) in a JSON text.
inline std::size_t count_complete_events(std::string_view json) {
  constexpr std::string_view key = "\"ph\"";
  const auto skip_space = [&json](std::size_t at) {
    while (at < json.size() && (json[at] == ' ' || json[at] == '\t' || json[at] == '\n' || json[at] == '\r')) ++at;
    return at;
  };
  std::size_t count = 0;
  for (std::size_t at = json.find(key); at != std::string_view::npos; at = json.find(key, at + 1)) {
    std::size_t next = skip_space(at + key.size());
    if (next >= json.size() || json[next] != ':') continue;
    next = skip_space(next + 1);
    if (json.substr(next, 3) == "\"X\"") ++count;
  }
  return count;
}

/// A fresh path in the temporary directory, removed on destruction.
class TempPath {
 public:
  explicit TempPath(std::string_view stem) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::ostringstream name;
    name << "stoke_" << stem << '_' << (info != nullptr ? info->name() : "test") << '_'
         << std::chrono::steady_clock::now().time_since_epoch().count() << ".json";
    std::string file = name.str();
    for (char& c : file) {
      if (c == '/') c = '_';
    }
    path_ = std::filesystem::temp_directory_path() / file;
  }
  ~TempPath() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;

  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace stoke::graph::test
