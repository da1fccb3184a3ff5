// ConvAlgorithmCache (nn/src/conv_algorithm_cache.hpp), the file CudaBackend keeps cuDNN's
// algorithm choices in: a round trip; files of another GPU, cuDNN or format version, and corrupt
// ones, ignored with one warning and replaced by the next save; the bound on entries; the file's
// folder and name from the environment; a save that cannot write warns once. Host code only: runs
// in every build.
#include "conv_algorithm_cache.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "scoped_environment.hpp"
#include "temp_folder.hpp"

namespace stoke::nn {
namespace {

namespace fs = std::filesystem;
using stoke::test::ScopedEnvironment;

const ConvAlgorithmIdentity kH200{.gpu = "NVIDIA H200", .sm_major = 9, .sm_minor = 0, .cudnn = 91200};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

ConvAlgorithmEntry entry_of(int i) {
  return {.algo = i % 8, .math = i % 4, .workspace = static_cast<std::size_t>(i) * 1024};
}

std::string key_of(int i) { return "fwd x{" + std::to_string(i) + ",3,32,32}nchw f32 k3 s1 p1 d1 g1"; }

class ConvAlgorithmCacheTest : public testing::TempFolderTest {
 protected:
  fs::path file() const { return dir_ / "algorithms.json"; }

  // A cache of `identity` on file(), loaded, with what it wrote on stderr while loading.
  ConvAlgorithmCache load(const ConvAlgorithmIdentity& identity, std::string& warnings,
                          std::size_t capacity = ConvAlgorithmCache::kDefaultCapacity) const {
    ::testing::internal::CaptureStderr();
    ConvAlgorithmCache cache(file(), identity, capacity);
    warnings = ::testing::internal::GetCapturedStderr();
    return cache;
  }

  // Saves a cache of `identity` holding keys 0 .. count - 1.
  void save_entries(const ConvAlgorithmIdentity& identity, int count) const {
    ConvAlgorithmCache cache(file(), identity);
    for (int i = 0; i < count; ++i) cache.insert(key_of(i), entry_of(i));
    ASSERT_TRUE(cache.save());
  }

  // The file is ignored: the cache is empty, and one warning names the file and says `why`.
  void expect_ignored(const ConvAlgorithmIdentity& identity, const std::string& why) const {
    std::string warnings;
    const ConvAlgorithmCache cache = load(identity, warnings);
    EXPECT_EQ(cache.size(), 0u);
    EXPECT_EQ(cache.find(key_of(0)), nullptr);
    EXPECT_EQ(count_of(warnings, "stoke: warning:"), 1u) << warnings;
    EXPECT_NE(warnings.find(file().string()), std::string::npos) << warnings;
    EXPECT_NE(warnings.find(why), std::string::npos) << warnings;
  }
};

TEST_F(ConvAlgorithmCacheTest, SavedEntriesLoadBack) {
  ConvAlgorithmCache cache(file(), kH200);
  EXPECT_EQ(cache.size(), 0u);
  cache.insert(key_of(1), {.algo = 1, .math = 3, .workspace = 0});
  cache.insert(key_of(2), {.algo = 7, .math = 0, .workspace = std::size_t{5} << 30});  // 5 GiB: past 32 bits
  cache.insert("bwd_filter x{8,64,56,56}nhwc bf16 k3 s1 p1 d1 g1", {.algo = 5, .math = 2, .workspace = 4096});
  ASSERT_TRUE(cache.save());

  std::string warnings;
  const ConvAlgorithmCache loaded = load(kH200, warnings);
  EXPECT_EQ(warnings, "");
  ASSERT_EQ(loaded.size(), 3u);
  ASSERT_NE(loaded.find(key_of(1)), nullptr);
  EXPECT_EQ(*loaded.find(key_of(1)), (ConvAlgorithmEntry{.algo = 1, .math = 3, .workspace = 0}));
  EXPECT_EQ(*loaded.find(key_of(2)), (ConvAlgorithmEntry{.algo = 7, .math = 0, .workspace = std::size_t{5} << 30}));
  const ConvAlgorithmEntry* bf16 = loaded.find("bwd_filter x{8,64,56,56}nhwc bf16 k3 s1 p1 d1 g1");
  ASSERT_NE(bf16, nullptr);
  EXPECT_EQ(*bf16, (ConvAlgorithmEntry{.algo = 5, .math = 2, .workspace = 4096}));
  EXPECT_EQ(loaded.find(key_of(3)), nullptr);
  // The file says what it is valid for.
  const std::string text = read_text(file());
  EXPECT_NE(text.find("\"NVIDIA H200\""), std::string::npos) << text;
  EXPECT_NE(text.find("91200"), std::string::npos) << text;
}

TEST_F(ConvAlgorithmCacheTest, AMissingFileIsAnEmptyCacheWithoutWarning) {
  std::string warnings;
  const ConvAlgorithmCache cache = load(kH200, warnings);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(warnings, "");
  EXPECT_FALSE(fs::exists(file()));  // loading writes nothing
}

TEST_F(ConvAlgorithmCacheTest, AFileOfAnotherGpuOrCudnnIsIgnored) {
  save_entries(kH200, 3);
  ConvAlgorithmIdentity other_gpu = kH200;
  other_gpu.gpu = "NVIDIA A100-SXM4-80GB";
  expect_ignored(other_gpu, "was written for 'NVIDIA H200'");
  ConvAlgorithmIdentity other_sm = kH200;
  other_sm.sm_minor = 1;
  expect_ignored(other_sm, "compute capability 9.0");
  ConvAlgorithmIdentity other_cudnn = kH200;
  other_cudnn.cudnn = 90100;
  expect_ignored(other_cudnn, "cuDNN 91200");
  // The file was left alone: its own GPU still reads it.
  std::string warnings;
  EXPECT_EQ(load(kH200, warnings).size(), 3u);
  EXPECT_EQ(warnings, "");
}

TEST_F(ConvAlgorithmCacheTest, AFileOfAnotherFormatVersionIsIgnored) {
  save_entries(kH200, 2);
  std::string text = read_text(file());
  const std::string version = "\"version\": " + std::to_string(ConvAlgorithmCache::kFormatVersion);
  const auto at = text.find(version);
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, version.size(), "\"version\": 999");
  write_text(file(), text);
  expect_ignored(kH200, "format version 999");
}

TEST_F(ConvAlgorithmCacheTest, ACorruptFileIsIgnoredWithOneWarningAndOverwrittenByTheNextSave) {
  write_text(file(), "{\"format\": \"stoke-cudnn-algorithms\", \"version\": 1, \"entr");
  std::string warnings;
  ConvAlgorithmCache cache = load(kH200, warnings);
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_EQ(count_of(warnings, "stoke: warning:"), 1u) << warnings;
  EXPECT_NE(warnings.find(file().string()), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("not a JSON object"), std::string::npos) << warnings;

  cache.insert(key_of(4), entry_of(4));
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(cache.save());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  const ConvAlgorithmCache reloaded = load(kH200, warnings);
  EXPECT_EQ(warnings, "");
  ASSERT_EQ(reloaded.size(), 1u);
  EXPECT_EQ(*reloaded.find(key_of(4)), entry_of(4));
}

TEST_F(ConvAlgorithmCacheTest, FilesWithBadFieldsAreIgnored) {
  save_entries(kH200, 2);
  const std::string good = read_text(file());
  const auto broken = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const auto at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
    write_text(file(), text);
  };
  broken("\"algo\": 0", "\"algo\": -1");
  expect_ignored(kH200, "\"algo\"");
  broken("\"workspace\": 0", "\"workspace\": \"none\"");
  expect_ignored(kH200, "\"workspace\"");
  broken("\"math\": 1", "\"math\": 4294967296");
  expect_ignored(kH200, "out of range");
  broken("\"entries\"", "\"entry\"");
  expect_ignored(kH200, "\"entries\"");
  write_text(file(), "[1, 2, 3]");
  expect_ignored(kH200, "not a JSON object");
  write_text(file(), "{\"format\": \"something else\"}");
  expect_ignored(kH200, "is not a \"stoke-cudnn-algorithms\" file");
}

TEST_F(ConvAlgorithmCacheTest, TheOldestEntriesGoBeyondTheCapacity) {
  ConvAlgorithmCache cache(file(), kH200, 3);
  for (int i = 0; i < 5; ++i) cache.insert(key_of(i), entry_of(i));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.find(key_of(0)), nullptr);
  EXPECT_EQ(cache.find(key_of(1)), nullptr);
  for (int i = 2; i < 5; ++i) {
    ASSERT_NE(cache.find(key_of(i)), nullptr) << i;
    EXPECT_EQ(*cache.find(key_of(i)), entry_of(i));
  }
  // A key inserted again takes the new entry and keeps its age: it still goes first.
  cache.insert(key_of(2), entry_of(7));
  EXPECT_EQ(*cache.find(key_of(2)), entry_of(7));
  cache.insert(key_of(5), entry_of(5));
  EXPECT_EQ(cache.find(key_of(2)), nullptr);
  ASSERT_TRUE(cache.save());
  EXPECT_EQ(count_of(read_text(file()), "\"key\""), 3u);

  // The file keeps the age order: a smaller cache loads its newest entries.
  std::string warnings;
  const ConvAlgorithmCache smaller = load(kH200, warnings, 2);
  EXPECT_EQ(warnings, "");
  EXPECT_EQ(smaller.size(), 2u);
  EXPECT_EQ(smaller.find(key_of(3)), nullptr);
  EXPECT_NE(smaller.find(key_of(4)), nullptr);
  EXPECT_NE(smaller.find(key_of(5)), nullptr);
}

TEST_F(ConvAlgorithmCacheTest, TheDefaultCapacityBoundsTheFile) {
  const int capacity = static_cast<int>(ConvAlgorithmCache::kDefaultCapacity);
  ASSERT_EQ(capacity, 4096);
  save_entries(kH200, capacity + 10);
  EXPECT_EQ(count_of(read_text(file()), "\"key\""), ConvAlgorithmCache::kDefaultCapacity);
  std::string warnings;
  const ConvAlgorithmCache loaded = load(kH200, warnings);
  EXPECT_EQ(loaded.size(), ConvAlgorithmCache::kDefaultCapacity);
  EXPECT_EQ(loaded.find(key_of(9)), nullptr);
  ASSERT_NE(loaded.find(key_of(10)), nullptr);
  EXPECT_EQ(*loaded.find(key_of(capacity + 9)), entry_of(capacity + 9));
}

TEST_F(ConvAlgorithmCacheTest, ASaveCreatesTheFolder) {
  ConvAlgorithmCache cache(dir_ / "a" / "b" / "algorithms.json", kH200);
  cache.insert(key_of(0), entry_of(0));
  EXPECT_TRUE(cache.save());
  EXPECT_TRUE(fs::is_regular_file(dir_ / "a" / "b" / "algorithms.json"));
}

TEST_F(ConvAlgorithmCacheTest, ASaveThatCannotWriteWarnsOnceAndDoesNotThrow) {
  write_text(dir_ / "plain", "a file where the cache's folder would be");
  ConvAlgorithmCache cache(dir_ / "plain" / "sub" / "algorithms.json", kH200);
  cache.insert(key_of(0), entry_of(0));
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(cache.save());
  EXPECT_FALSE(cache.save());
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count_of(warnings, "stoke: warning:"), 1u) << warnings;
  EXPECT_NE(warnings.find((dir_ / "plain" / "sub" / "algorithms.json").string()), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("STOKE_CUDNN_CACHE=0"), std::string::npos) << warnings;
  EXPECT_NE(cache.find(key_of(0)), nullptr);  // still in memory
}

TEST_F(ConvAlgorithmCacheTest, TheFileLivesInStokesCacheFolderOrNowhere) {
  {
    const ScopedEnvironment stoke("STOKE_CACHE", (dir_ / "stoke").string());
    const ScopedEnvironment on("STOKE_CUDNN_CACHE", "1");
    const std::optional<ConvAlgorithmCache> cache = open_conv_algorithm_cache(kH200);
    ASSERT_TRUE(cache.has_value());
    EXPECT_EQ(cache->file(), dir_ / "stoke" / conv_algorithm_cache_file_name(kH200));
  }
  {
    const ScopedEnvironment stoke("STOKE_CACHE", "");
    const ScopedEnvironment xdg("XDG_CACHE_HOME", "");
    const ScopedEnvironment home("HOME", "");
    const ScopedEnvironment on("STOKE_CUDNN_CACHE", "1");
    EXPECT_FALSE(open_conv_algorithm_cache(kH200).has_value());  // nowhere to keep it
  }
}

TEST_F(ConvAlgorithmCacheTest, TheFileIsNamedForTheGpuAndCudnn) {
  EXPECT_EQ(conv_algorithm_cache_file_name(kH200), "cudnn-algorithms-nvidia-h200-sm90-cudnn91200.json");
  EXPECT_EQ(conv_algorithm_cache_file_name(
                {.gpu = " NVIDIA GeForce RTX 4090 / (x)", .sm_major = 8, .sm_minor = 9, .cudnn = 90100}),
            "cudnn-algorithms-nvidia-geforce-rtx-4090-x-sm89-cudnn90100.json");
  EXPECT_EQ(conv_algorithm_cache_file_name({.gpu = "../..", .sm_major = 12, .sm_minor = 0, .cudnn = 1}),
            "cudnn-algorithms-gpu-sm120-cudnn1.json");
  const std::string long_name(300, 'a');
  EXPECT_LT(conv_algorithm_cache_file_name({.gpu = long_name}).size(), 120u);
}

TEST_F(ConvAlgorithmCacheTest, StokeCudnnCacheTurnsTheFileOff) {
  const ScopedEnvironment folder("STOKE_CACHE", dir_.string());
  for (const char* off : {"0", "off", "OFF", "false", "No"}) {
    const ScopedEnvironment variable("STOKE_CUDNN_CACHE", off);
    EXPECT_FALSE(conv_algorithm_cache_enabled()) << off;
    EXPECT_FALSE(open_conv_algorithm_cache(kH200).has_value()) << off;
  }
  for (const char* on : {"1", "on", "yes"}) {
    const ScopedEnvironment variable("STOKE_CUDNN_CACHE", on);
    EXPECT_TRUE(conv_algorithm_cache_enabled()) << on;
  }
  const ScopedEnvironment variable("STOKE_CUDNN_CACHE", "1");
  save_entries(kH200, 1);  // file(): not the name open_conv_algorithm_cache looks for
  std::optional<ConvAlgorithmCache> cache = open_conv_algorithm_cache(kH200);
  ASSERT_TRUE(cache.has_value());
  EXPECT_EQ(cache->file(), dir_ / "cudnn-algorithms-nvidia-h200-sm90-cudnn91200.json");
  EXPECT_EQ(cache->size(), 0u);
  cache->insert(key_of(0), entry_of(0));
  ASSERT_TRUE(cache->save());
  EXPECT_EQ(open_conv_algorithm_cache(kH200)->size(), 1u);
}

}  // namespace
}  // namespace stoke::nn
