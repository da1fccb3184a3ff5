// remote::ShardCache against range_server.py on the loopback interface: a fetched object has its
// bytes and a second fetch downloads nothing; the budget holds at every step (checked after each
// fetch, in the stats and on the disk) with the least recently used object going first and held
// ones kept; a fetch that cannot fit says why; a failed download leaves nothing behind; a new
// cache removes a killed run's .part files and takes the complete ones, checking their sizes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <stoke/remote/http_client.hpp>
#include <stoke/remote/shard_cache.hpp>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "range_server.hpp"

namespace stoke::remote {
namespace {

namespace fs = std::filesystem;

std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// The bytes of the files in `folder`, as the disk has them.
std::uint64_t bytes_on_disk(const fs::path& folder) {
  std::uint64_t total = 0;
  for (const auto& file : fs::directory_iterator(folder)) total += file.file_size();
  return total;
}

class ShardCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("stoke_shard_cache_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "served");
    for (const char* name : {"a", "b", "c", "d"}) write(name, std::string(100'000, name[0]));
    server_ = std::make_unique<RangeServer>(root_ / "served");
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(root_);
  }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(root_ / "served" / (name + ".tar"), std::ios::binary) << bytes;
  }
  RemoteUrl url(const std::string& name) const { return server_->url("/files/" + name + ".tar"); }
  ShardCache cache(std::uint64_t budget) const {
    return ShardCache({.folder = root_ / "cache", .budget_bytes = budget, .chunk_bytes = 30'000}, client_);
  }

  fs::path root_;
  std::unique_ptr<RangeServer> server_;
  std::shared_ptr<HttpClient> client_ = std::make_shared<HttpClient>();
};

TEST_F(ShardCacheTest, AFetchedObjectHasItsBytesAndASecondFetchDownloadsNothing) {
  ShardCache shards = cache(1'000'000);
  {
    const ShardCache::Entry a = shards.fetch(url("a"));
    EXPECT_EQ(contents(a.path()), std::string(100'000, 'a'));
    EXPECT_EQ(a.bytes(), 100'000u);
    EXPECT_EQ(a.path().filename().string(), ShardCache::file_name(url("a")));
    EXPECT_TRUE(a.path().filename().string().ends_with("-a.tar"));
  }
  const std::uint64_t fetched = client_->stats().bytes;
  const ShardCache::Entry again = shards.fetch(url("a"));
  EXPECT_EQ(client_->stats().bytes, fetched) << "no byte fetched the second time";
  const ShardCacheStats stats = shards.stats();
  EXPECT_EQ(stats.hits, 1u);
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.bytes_downloaded, 100'000u);
  EXPECT_EQ(stats.bytes_held, 100'000u);
}

TEST_F(ShardCacheTest, TheBudgetHoldsTheLeastRecentlyUsedGoesFirstAndHeldOnesStay) {
  ShardCache shards = cache(250'000);  // room for two
  const auto check_budget = [&](const char* when) {
    EXPECT_LE(shards.stats().bytes_held, 250'000u) << when;
    EXPECT_LE(bytes_on_disk(root_ / "cache"), 250'000u) << when;
  };
  (void)shards.fetch(url("a"));
  check_budget("after a");
  (void)shards.fetch(url("b"));
  check_budget("after b");
  (void)shards.fetch(url("a"));  // a is now more recent than b
  (void)shards.fetch(url("c"));  // b goes
  check_budget("after c");
  EXPECT_TRUE(fs::exists(root_ / "cache" / ShardCache::file_name(url("a"))));
  EXPECT_FALSE(fs::exists(root_ / "cache" / ShardCache::file_name(url("b"))));
  EXPECT_EQ(shards.stats().evictions, 1u);

  // Held entries stay; when they fill the budget, a fetch says why instead of exceeding it.
  const ShardCache::Entry held_a = shards.fetch(url("a"));
  const ShardCache::Entry held_d = shards.fetch(url("d"));  // c goes, a is held
  check_budget("after d");
  EXPECT_TRUE(fs::exists(held_a.path()));
  try {
    (void)shards.fetch(url("b"));
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("no room for " + url("b").text() + " (100000 bytes) within the budget of 250000 bytes"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("200000 bytes are held by 2 shards"), std::string::npos) << what;
  }
  check_budget("after the refusal");
  EXPECT_LE(shards.stats().peak_bytes_held, 250'000u);
  EXPECT_THROW((void)cache(50'000).fetch(url("c")), std::runtime_error) << "larger than the whole budget";
}

TEST_F(ShardCacheTest, ThreadsFetchingOneObjectDownloadItOnce) {
  ShardCache shards = cache(1'000'000);
  std::vector<std::thread> threads;
  std::vector<std::string> seen(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { seen[static_cast<std::size_t>(t)] = contents(shards.fetch(url("b")).path()); });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(seen, std::vector<std::string>(4, std::string(100'000, 'b')));
  EXPECT_EQ(shards.stats().misses, 1u);
  EXPECT_EQ(shards.stats().hits, 3u);
}

TEST_F(ShardCacheTest, AFailedDownloadLeavesNothingBehind) {
  ShardCache shards = cache(1'000'000);
  EXPECT_THROW((void)shards.fetch(server_->url("/files/missing.tar")), FetchError);
  EXPECT_THROW((void)shards.fetch(server_->url("/forbidden/a.tar")), FetchError);
  // A server that stops sending mid-object: the stall limit ends the download, its .part goes.
  using namespace std::chrono_literals;
  ShardCache impatient({.folder = root_ / "cache", .budget_bytes = 1'000'000},
                       std::make_shared<HttpClient>(FetchOptions{.retries = 0, .stall_limit = 300ms}));
  EXPECT_THROW((void)impatient.fetch(server_->url("/stall/a.tar")), FetchError);
  EXPECT_EQ(bytes_on_disk(root_ / "cache"), 0u);
  EXPECT_TRUE(fs::is_empty(root_ / "cache"));
  EXPECT_EQ(shards.stats().bytes_held, 0u);
}

TEST_F(ShardCacheTest, APrefetchUsesOnlyFreeRoomAndAStoppedOneLeavesNothing) {
  ShardCache shards = cache(250'000);
  { const ShardCache::Entry a = shards.fetch(url("a")); }
  EXPECT_TRUE(shards.prefetch(url("b")));
  EXPECT_FALSE(shards.prefetch(url("c"))) << "the room is taken: nothing removed for a prefetch";
  EXPECT_EQ(shards.stats().evictions, 0u);
  EXPECT_EQ(shards.stats().prefetched, 1u);
  EXPECT_EQ(shards.stats().misses, 1u);
  { const ShardCache::Entry b = shards.fetch(url("b")); }
  EXPECT_EQ(shards.stats().hits, 1u) << "the fetch after the prefetch finds it";

  ShardCache other = ShardCache({.folder = root_ / "other", .budget_bytes = 1'000'000}, client_);
  std::stop_source stop;
  stop.request_stop();
  EXPECT_THROW(other.prefetch(url("d"), stop.get_token()), FetchError);
  EXPECT_EQ(bytes_on_disk(root_ / "other"), 0u) << "no .part left";
  EXPECT_TRUE(other.prefetch(url("d"))) << "and the object can be fetched after";
}

TEST_F(ShardCacheTest, WithARoomWaitAFetchWaitsForHeldRoomInsteadOfFailing) {
  ShardCache shards({.folder = root_ / "cache", .budget_bytes = 150'000, .room_wait = std::chrono::seconds(30)},
                    client_);
  auto a = std::make_unique<ShardCache::Entry>(shards.fetch(url("a")));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    a.reset();
  });
  const ShardCache::Entry b = shards.fetch(url("b"));  // waits for a to be let go
  release.join();
  EXPECT_EQ(contents(b.path()), std::string(100'000, 'b'));
  EXPECT_EQ(shards.stats().evictions, 1u);
  EXPECT_LE(shards.stats().peak_bytes_held, 150'000u);
}

TEST_F(ShardCacheTest, ANewCacheRemovesPartFilesAndTakesCompleteOnesCheckingTheirSize) {
  {
    ShardCache first = cache(1'000'000);
    (void)first.fetch(url("a"));
    (void)first.fetch(url("b"));
  }
  // A killed run's half download, and an object that changed on the server since it was cached.
  std::ofstream(root_ / "cache" / (ShardCache::file_name(url("c")) + ".part"), std::ios::binary) << "half";
  write("b", std::string(120'000, 'B'));
  ShardCache second = cache(1'000'000);
  EXPECT_FALSE(fs::exists(root_ / "cache" / (ShardCache::file_name(url("c")) + ".part")));
  EXPECT_EQ(second.stats().bytes_held, 200'000u);
  const std::uint64_t before = client_->stats().bytes;
  EXPECT_EQ(contents(second.fetch(url("a")).path()), std::string(100'000, 'a'));
  EXPECT_EQ(client_->stats().bytes, before) << "a was taken from the folder";
  EXPECT_EQ(contents(second.fetch(url("b")).path()), std::string(120'000, 'B')) << "b changed: fetched again";
  EXPECT_EQ(second.stats().misses, 1u);
  // A smaller budget than the last run's: the least recently used files go at once.
  ShardCache third = cache(150'000);
  EXPECT_LE(bytes_on_disk(root_ / "cache"), 150'000u);
}

}  // namespace
}  // namespace stoke::remote
