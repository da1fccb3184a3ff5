// pack_dataset: a folder packed and read back through PackedDataset equals the folder (names,
// labels, bytes); a file that cannot be decoded is skipped and named with its reason; --resize's
// re-encoding is counted; on_error = fail writes nothing. The same as tar shards read back
// through TarShards (with masks and targets, cut by size, the same bytes whatever the thread
// count), and shards left by an earlier, larger pack reported.
#include "stoke/nodes/pack_dataset.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"
#include "stoke/graph/errors.hpp"
#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/file_list.hpp"
#include "stoke/nodes/image_folder.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

TEST(PackDataset, RoundTripsNamesLabelsAndBytesAndReportsProgress) {
  TempDir dir;
  for (int i = 0; i < 4; ++i) test::write_bytes(dir / "images/cat" / (std::to_string(i) + ".jpg"), test::small_jpeg(i));
  for (int i = 0; i < 3; ++i)
    test::write_bytes(dir / "images/dog" / (std::to_string(i) + ".jpg"), test::small_jpeg(9 + i));
  test::write_text(dir / "images/dog/readme.txt", "not an image");
  const ImageFolder folder(dir / "images");

  std::size_t calls = 0, last_written = 0;
  const PackReport report = pack_dataset(folder, dir / "x.stoke", {.threads = 3, .root = folder.root()},
                                         [&](std::size_t written, std::size_t total, std::uint64_t) {
                                           ++calls;
                                           last_written = written;
                                           EXPECT_EQ(total, 7u);
                                         });
  ASSERT_TRUE(report.written);
  EXPECT_FALSE(report.interrupted);
  EXPECT_EQ(report.summary.items, 7u);
  EXPECT_EQ(calls, 7u);
  EXPECT_EQ(last_written, 7u);
  EXPECT_TRUE(report.failed.empty());
  ASSERT_EQ(report.ignored.size(), 1u);
  EXPECT_THAT(report.ignored[0].path, HasSubstr("readme.txt"));

  const PackedDataset pack(dir / "x.stoke");
  ASSERT_EQ(pack.size(), folder.size());
  EXPECT_EQ(pack.classes(), folder.classes());
  EXPECT_EQ(report.summary.data_bytes, pack.data_size());
  for (std::size_t i = 0; i < pack.size(); ++i) {
    EXPECT_EQ(test::to_vector(pack.read(i).bytes), test::to_vector(folder.read(i).bytes)) << i;
    EXPECT_EQ(pack.label(i), folder.label(i)) << i;
    EXPECT_EQ(pack.name(i), fs::path(folder.name(i)).lexically_relative(folder.root()).generic_string()) << i;
  }
}

TEST(PackDataset, ResizeSkipsAnUndecodableFileNamingItAndCountsTheReencoded) {
  TempDir dir;
  test::write_bytes(dir / "images/a/big.jpg", test::small_jpeg(1, 64, 40));
  test::write_bytes(dir / "images/a/small.jpg", test::small_jpeg(2, 20, 12));
  test::write_text(dir / "images/b/corrupt.jpg", "this is not a JPEG");
  const ImageFolder folder(dir / "images");

  const PackReport report = pack_dataset(folder, dir / "r.stoke", {.resize = 16, .root = folder.root()});
  ASSERT_TRUE(report.written);
  EXPECT_EQ(report.summary.items, 2u);
  EXPECT_EQ(report.resized, 1u);  // small.jpg is small enough: kept as is
  ASSERT_EQ(report.failed.size(), 1u);
  EXPECT_THAT(report.failed[0].path, HasSubstr("corrupt.jpg"));
  EXPECT_THAT(report.failed[0].reason, ::testing::Not(HasSubstr("corrupt.jpg: "))) << "the path is said once";
  EXPECT_FALSE(report.failed[0].reason.empty());
  EXPECT_EQ(PackedDataset(dir / "r.stoke").resize(), 16u);
}

TEST(PackDataset, FailPolicyThrowsNamingTheFileAndWritesNothing) {
  TempDir dir;
  test::write_bytes(dir / "images/a/good.jpg", test::small_jpeg(1));
  test::write_text(dir / "images/a/corrupt.jpg", "this is not a JPEG");
  const ImageFolder folder(dir / "images");
  EXPECT_THAT(test::error_message(
                  [&] { pack_dataset(folder, dir / "f.stoke", {.resize = 8, .on_error = graph::OnError::fail}); }),
              HasSubstr("corrupt.jpg"));
  EXPECT_FALSE(fs::exists(dir / "f.stoke"));
  for (const auto& entry : fs::directory_iterator(dir.path()))
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr("f.stoke"))) << "left behind";
}

TEST(PackDataset, NothingPackableWritesNothingAndListsEveryFailure) {
  TempDir dir;
  test::write_text(dir / "images/a/one.jpg", "not a JPEG");
  test::write_text(dir / "images/a/two.jpg", "nor this");
  const ImageFolder folder(dir / "images");
  const PackReport report = pack_dataset(folder, dir / "n.stoke", {.resize = 8});
  EXPECT_FALSE(report.written);
  EXPECT_EQ(report.failed.size(), 2u);
  EXPECT_FALSE(fs::exists(dir / "n.stoke"));
}

// ---- tar shards ------------------------------------------------------------------------------

PackOptions tar_options(TarWriterOptions tar = {}, int threads = 2) {
  PackOptions options;
  options.format = PackFormat::tar;
  options.tar = tar;
  options.threads = threads;
  return options;
}

TarShardsOptions no_fallback() {
  TarShardsOptions options;
  options.fallback_index_dir.clear();
  return options;
}

/// images/{cat,dog}/<i>.jpg: 5 + 4 JPEGs of 48 x 32, and a stray text file.
void make_folder(const fs::path& root) {
  for (int i = 0; i < 5; ++i)
    test::write_bytes(root / "cat" / (std::to_string(i) + ".jpg"), test::small_jpeg(i, 48, 32));
  for (int i = 0; i < 4; ++i)
    test::write_bytes(root / "dog" / (std::to_string(i) + ".jpg"), test::small_jpeg(20 + i, 48, 32));
  test::write_text(root / "dog/readme.txt", "not an image");
}

TEST(PackDatasetTar, ShardsReadBackAsTheFolderInOrderCutBySizeAndIndexed) {
  TempDir dir;
  make_folder(dir / "images");
  fs::create_directories(dir / "shards");
  const ImageFolder folder(dir / "images");
  const std::uint64_t limit = 4096;  // about 3 of these JPEGs (~1 KB each, with .cls) a shard

  std::size_t calls = 0;
  std::uint64_t last_bytes = 0;
  const PackReport report = pack_dataset(folder, dir / "shards/train-%06d.tar", tar_options({.shard_bytes = limit}),
                                         [&](std::size_t written, std::size_t total, std::uint64_t bytes) {
                                           EXPECT_EQ(written, ++calls);
                                           EXPECT_EQ(total, 9u);
                                           EXPECT_GT(bytes, last_bytes);
                                           last_bytes = bytes;
                                         });
  ASSERT_TRUE(report.written);
  EXPECT_EQ(calls, 9u);
  EXPECT_EQ(report.summary.items, 0u) << "the .stoke summary stays empty";
  ASSERT_GE(report.shards.size(), 3u);
  std::size_t samples = 0;
  std::uint64_t bytes = 0;
  for (const TarShardSummary& shard : report.shards) {
    EXPECT_LE(shard.bytes, limit) << shard.path;
    EXPECT_EQ(shard.bytes, fs::file_size(shard.path)) << shard.path;
    EXPECT_EQ(shard.index, tar_index_path(shard.path));
    EXPECT_EQ(shard.first, samples);
    samples += shard.samples;
    bytes += shard.bytes;
  }
  EXPECT_EQ(samples, 9u);
  EXPECT_EQ(last_bytes + 1024, bytes) << "progress counts members; each finished shard its end too";
  EXPECT_EQ(report.shards[1].path, dir / "shards/train-000001.tar");
  EXPECT_TRUE(report.stale_shards.empty());
  ASSERT_EQ(report.ignored.size(), 1u);

  const TarShards shards(dir / "shards", no_fallback());
  for (const TarShardInfo& info : shards.shards()) EXPECT_EQ(info.source, TarIndexSource::loaded);
  ASSERT_EQ(shards.size(), folder.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    EXPECT_EQ(test::to_vector(shards.read(i).bytes), test::to_vector(folder.read(i).bytes)) << i;
    EXPECT_EQ(shards.label(i), folder.label(i)) << i;
    EXPECT_EQ(shards.key(i), tar_key(i, 9)) << i;
  }
}

TEST(PackDatasetTar, ShardsDoNotDependOnTheThreadCount) {
  TempDir dir;
  make_folder(dir / "images");
  const ImageFolder folder(dir / "images");
  for (const int threads : {1, 4}) {
    const fs::path out = dir / ("t" + std::to_string(threads)) / "s-%02d.tar";
    fs::create_directories(out.parent_path());
    ASSERT_TRUE(pack_dataset(folder, out, tar_options({.shard_samples = 4}, threads)).written);
  }
  for (const char* shard : {"s-00.tar", "s-01.tar", "s-02.tar"}) {
    EXPECT_EQ(read_file((dir / "t1" / shard).string()), read_file((dir / "t4" / shard).string())) << shard;
  }
}

TEST(PackDatasetTar, MasksAndTargetsRoundTripWhereAStokePackRefusesThem) {
  TempDir dir;
  for (int i = 0; i < 3; ++i) {
    test::write_bytes(dir / "data/scans" / (std::to_string(i) + ".png"), test::distinct_bytes(i + 1));
    test::write_bytes(dir / "data/masks" / (std::to_string(i) + ".png"), test::distinct_bytes(i + 50, 30));
  }
  test::write_text(dir / "data/list.csv",
                   "path,label,mask,age,box\n"
                   "scans/0.png,1,masks/0.png,63,0 1 2.5 4\n"
                   "scans/1.png,,masks/1.png,41.5,1 1 1 1\n"
                   "scans/2.png,0,,0.1,-1 0 1e-3 7\n");
  const FileList list(dir / "data/list.csv", dir / "data");

  const PackReport tar = pack_dataset(list, dir / "seg.tar", tar_options());
  ASSERT_TRUE(tar.written);
  EXPECT_TRUE(tar.failed.empty()) << tar.failed.front().reason;
  const TarShards shards(dir / "seg.tar", no_fallback());
  ASSERT_EQ(shards.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const Sample from_list = list.read(i), from_tar = shards.read(i);
    EXPECT_EQ(test::to_vector(from_tar.bytes), test::to_vector(from_list.bytes)) << i;
    EXPECT_EQ(from_tar.label, from_list.label) << i;
    EXPECT_EQ(test::to_vector(from_tar.mask), test::to_vector(from_list.mask)) << i;
    EXPECT_EQ(from_tar.targets, from_list.targets) << i;
  }
  EXPECT_EQ(shards.read(1).label, -1);
  EXPECT_TRUE(shards.read(2).mask.empty());

  const PackReport stoke = pack_dataset(list, dir / "seg.stoke");
  EXPECT_FALSE(stoke.written);
  ASSERT_EQ(stoke.failed.size(), 3u);
  EXPECT_THAT(stoke.failed[0].reason, HasSubstr("carries a mask"));
  EXPECT_THAT(stoke.failed[0].reason, HasSubstr("--format tar"));
}

TEST(PackDatasetTar, ResizeStoresReencodedImagesAsJpgAndRefusesAMask) {
  TempDir dir;
  test::write_bytes(dir / "data/big.jpeg", test::small_jpeg(1, 64, 40));
  test::write_bytes(dir / "data/small.JPG", test::small_jpeg(2, 20, 12));
  test::write_bytes(dir / "data/masked.jpg", test::small_jpeg(3, 64, 40));
  test::write_bytes(dir / "data/mask.png", test::distinct_bytes(4));
  test::write_text(dir / "data/list.csv", "path,label,mask\nbig.jpeg,0,\nsmall.JPG,1,\nmasked.jpg,0,mask.png\n");
  const FileList list(dir / "data/list.csv", dir / "data");

  PackOptions options = tar_options();
  options.resize = 16;
  const PackReport report = pack_dataset(list, dir / "r.tar", options);
  ASSERT_TRUE(report.written);
  EXPECT_EQ(report.resized, 1u);
  ASSERT_EQ(report.failed.size(), 1u);
  EXPECT_THAT(report.failed[0].path, HasSubstr("masked.jpg"));
  EXPECT_THAT(report.failed[0].reason, HasSubstr("no longer match a resized image"));

  const TarShards shards(dir / "r.tar", no_fallback());
  ASSERT_EQ(shards.size(), 2u);
  const Decoder decoder;
  const ImageInfo big = decoder.probe(shards.read(0));
  EXPECT_EQ(std::pair(big.width, big.height), std::pair(25, 16));
  EXPECT_EQ(test::to_vector(shards.read(1).bytes), test::small_jpeg(2, 20, 12));  // small enough: kept
  // The members' names: the re-encoded image is .jpg, the kept one keeps its (lower-case) extension.
  const std::vector<std::byte> tar = read_file((dir / "r.tar").string());
  const std::string text(reinterpret_cast<const char*>(tar.data()), tar.size());
  EXPECT_EQ(text.find("000000.jpg"), 0u);
  EXPECT_NE(text.find("000001.jpg"), std::string::npos);
  EXPECT_EQ(text.find("000000.jpeg"), std::string::npos);
}

TEST(PackDatasetTar, FailPolicyRemovesTheShardsItFinished) {
  TempDir dir;
  for (int i = 0; i < 4; ++i) test::write_bytes(dir / "images/a" / (std::to_string(i) + ".jpg"), test::small_jpeg(i));
  test::write_text(dir / "images/a/9-corrupt.jpg", "this is not a JPEG");
  const ImageFolder folder(dir / "images");
  fs::create_directories(dir / "out");
  PackOptions options = tar_options({.shard_samples = 1}, 1);
  options.resize = 8;
  options.on_error = graph::OnError::fail;
  EXPECT_THAT(test::error_message([&] { pack_dataset(folder, dir / "out/f-%03d.tar", options); }),
              HasSubstr("9-corrupt.jpg"));
  EXPECT_TRUE(fs::is_empty(dir / "out")) << fs::directory_iterator(dir / "out")->path();
}

TEST(PackDatasetTar, ReportsShardsLeftByALargerEarlierPackAndRefusesBadOptions) {
  TempDir dir;
  make_folder(dir / "images");
  const ImageFolder folder(dir / "images");
  fs::create_directories(dir / "out");
  ASSERT_EQ(pack_dataset(folder, dir / "out/x-%02d.tar", tar_options({.shard_samples = 2})).shards.size(), 5u);
  const PackReport again = pack_dataset(folder, dir / "out/x-%02d.tar", tar_options({.shard_samples = 4}));
  ASSERT_EQ(again.shards.size(), 3u);
  EXPECT_EQ(again.stale_shards, (std::vector<fs::path>{dir / "out/x-03.tar", dir / "out/x-04.tar"}));

  EXPECT_THAT(test::error_message([&] { pack_dataset(folder, dir / "out/y-%d.tar", tar_options()); }),
              HasSubstr("zero-padded"));
  EXPECT_THAT(test::error_message([&] { pack_dataset(folder, dir / "one.tar", tar_options({.shard_bytes = 1000})); }),
              HasSubstr("put a number in the name"));
  EXPECT_THAT(test::error_message([&] {
                PackOptions stoke;
                stoke.tar.shard_samples = 3;
                pack_dataset(folder, dir / "s.stoke", stoke);
              }),
              HasSubstr("need PackFormat::tar"));
}

}  // namespace
}  // namespace stoke::nodes
