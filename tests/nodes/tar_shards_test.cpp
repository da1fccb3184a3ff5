#include "stoke/nodes/tar_shards.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../remote/range_server.hpp"
#include "../remote/s3_server.hpp"
#include "dataset_test_support.hpp"
#include "scoped_environment.hpp"
#include "stoke/graph/pipeline.hpp"
#include "stoke/nodes/dataset.hpp"
#include "stoke/nodes/dataset_registry.hpp"
#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/image_folder.hpp"
#include "stoke/nodes/read_on_threads.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

struct Member {
  std::string name;
  std::vector<std::byte> bytes;
};

std::vector<std::byte> text(std::string_view value) {
  const auto bytes = std::as_bytes(std::span(value.data(), value.size()));
  return {bytes.begin(), bytes.end()};
}

/// Writes `members` as a pax (restricted) tar with libarchive, gzip-compressed when asked.
void write_tar(const fs::path& path, const std::vector<Member>& members, bool gzip = false) {
  fs::create_directories(path.parent_path());
  archive* a = archive_write_new();
  ASSERT_EQ(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
  if (gzip) {
    ASSERT_EQ(archive_write_add_filter_gzip(a), ARCHIVE_OK);
  }
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK) << archive_error_string(a);
  for (const Member& member : members) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, member.name.c_str());
    archive_entry_set_size(entry, static_cast<la_int64_t>(member.bytes.size()));
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_perm(entry, 0644);
    ASSERT_EQ(archive_write_header(a, entry), ARCHIVE_OK) << archive_error_string(a);
    ASSERT_EQ(archive_write_data(a, member.bytes.data(), member.bytes.size()),
              static_cast<la_ssize_t>(member.bytes.size()));
    archive_entry_free(entry);
  }
  ASSERT_EQ(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
}

/// Samples "s0", "s1", ...: a JPEG each and a .cls with label i % 3.
std::vector<Member> labelled_samples(int count, int first = 0) {
  std::vector<Member> members;
  for (int i = first; i < first + count; ++i) {
    const std::string key = "s" + std::to_string(i);
    members.push_back({key + ".jpg", test::small_jpeg(i)});
    members.push_back({key + ".cls", text(std::to_string(i % 3) + "\n")});
  }
  return members;
}

/// Where `bytes` start in `file` (they must be there).
std::size_t find_in_file(const fs::path& file, const std::vector<std::byte>& bytes) {
  const std::vector<std::byte> all = read_file(file.string());
  const auto at = std::search(all.begin(), all.end(), bytes.begin(), bytes.end());
  if (at == all.end()) throw std::runtime_error("bytes not found in " + file.string());
  return static_cast<std::size_t>(at - all.begin());
}

std::vector<std::string> keys(const TarShards& shards) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < shards.size(); ++i) out.emplace_back(shards.key(i));
  return out;
}

/// ignored() as path -> reason.
std::map<std::string, std::string> reasons(const Dataset& dataset) {
  std::map<std::string, std::string> out;
  for (const IgnoredFile& file : dataset.ignored()) out[file.path] += file.reason;
  return out;
}

TarShardsOptions no_fallback() {
  TarShardsOptions options;
  options.fallback_index_dir.clear();
  return options;
}

// ---- the same samples as a folder ------------------------------------------------------------

TEST(TarShards, GivesTheSameSamplesAsTheSameFilesInAnImageFolderInTheSameOrder) {
  TempDir dir;
  // Classes "0", "1", "2" (ImageFolder's sorted folder names = the .cls labels); files in name order.
  std::vector<Member> members;
  int seed = 0;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 4 + c; ++i) {
      const std::string key = std::to_string(c) + "/img" + std::to_string(i);
      const std::vector<std::byte> jpeg = test::small_jpeg(seed++);
      test::write_bytes(dir / "folder" / (key + ".jpg"), jpeg);
      members.push_back({key + ".jpg", jpeg});
      members.push_back({key + ".cls", text(std::to_string(c))});
    }
  }
  // Two shards, given in reverse order: items follow the shards' byte order.
  const std::size_t half = members.size() / 4 * 2;  // even: a sample's .jpg and .cls stay together
  write_tar(dir / "train-000000.tar", {members.begin(), members.begin() + static_cast<std::ptrdiff_t>(half)});
  write_tar(dir / "train-000001.tar", {members.begin() + static_cast<std::ptrdiff_t>(half), members.end()});
  const auto tar = std::make_shared<const TarShards>(
      std::vector<fs::path>{dir / "train-000001.tar", dir / "train-000000.tar"}, no_fallback());
  const auto folder = std::make_shared<const ImageFolder>(dir / "folder");

  ASSERT_EQ(tar->size(), folder->size());
  EXPECT_EQ(tar->classes(), folder->classes());
  EXPECT_TRUE(tar->ignored().empty()) << tar->ignored().front().path << ": " << tar->ignored().front().reason;
  ASSERT_EQ(tar->shards().size(), 2u);
  EXPECT_EQ(tar->shards()[0].path, dir / "train-000000.tar");
  EXPECT_EQ(tar->shards()[1].first, tar->shards()[0].samples);
  for (std::size_t i = 0; i < tar->size(); ++i) {
    const Sample from_tar = tar->read(i);
    const Sample from_folder = folder->read(i);
    EXPECT_EQ(test::to_vector(from_tar.bytes), test::to_vector(from_folder.bytes)) << i;
    EXPECT_EQ(from_tar.label, from_folder.label) << i;
    EXPECT_EQ(tar->label(i), folder->label(i)) << i;
    EXPECT_EQ(from_tar.index, i);
    EXPECT_EQ(from_tar.encoding, Encoding::encoded);
    const fs::path relative = fs::path(folder->name(i)).lexically_relative(dir / "folder").replace_extension();
    EXPECT_EQ(std::string(tar->key(i)), relative.string());
    EXPECT_EQ(from_tar.name, tar->shards()[tar->shard_of(i)].path.string() + "#" + relative.string());
  }

  // Shuffled, sharded epochs visit the same bytes in the same order.
  for (const std::uint32_t rank : {0U, 1U}) {
    const OrderOptions order_options{.shuffle = true, .seed = 42, .rank = rank, .world = 2};
    const EpochOrder order(tar->size(), order_options);
    for (const std::uint32_t epoch : {0U, 1U}) {
      for (const std::uint64_t i : order.indices(epoch)) {
        EXPECT_EQ(test::to_vector(tar->read(i).bytes), test::to_vector(folder->read(i).bytes));
      }
    }
  }
}

TEST(TarShards, OpensAFolderOfShardsAndListsItsOtherFiles) {
  TempDir dir;
  write_tar(dir / "shards" / "b.tar", labelled_samples(2, 10));
  write_tar(dir / "shards" / "a.tar", labelled_samples(3));
  test::write_text(dir / "shards" / "README.txt", "shards");
  fs::create_directories(dir / "shards" / "sub");
  const TarShards first(dir / "shards", no_fallback());  // writes the .stoke-idx files beside the shards
  const TarShards shards(dir / "shards", no_fallback());
  EXPECT_EQ(keys(shards), (std::vector<std::string>{"s0", "s1", "s2", "s10", "s11"}));
  EXPECT_EQ(shards.classes(), (std::vector<std::string>{"0", "1", "2"}));
  const auto why = reasons(shards);
  EXPECT_EQ(why.size(), 2u);  // not the index files
  EXPECT_THAT(why.at((dir / "shards" / "README.txt").string()), HasSubstr("not a .tar shard"));
  EXPECT_THAT(why.at((dir / "shards" / "sub").string()), HasSubstr("subfolders are not read"));
  EXPECT_EQ(shards.name(3), (dir / "shards" / "b.tar").string() + "#s10");
}

// ---- fields ----------------------------------------------------------------------------------

TEST(TarShards, MasksAndJsonTargetsArriveInTheSample) {
  TempDir dir;
  const std::vector<std::byte> mask = test::distinct_bytes(99, 40);
  write_tar(dir / "seg.tar", {
                                 {"scans/a.png", test::distinct_bytes(1)},
                                 {"scans/a.mask.png", mask},
                                 {"scans/a.json", text(R"({"age": 63, "box": [1, 2.5, 3, 4], "caption": "x"})")},
                                 {"scans/a.cls", text("2")},
                                 {"scans/a.txt", text("a caption")},
                                 {"scans/b.jpg", test::distinct_bytes(2)},
                                 {"scans/b.txt", text("another")},
                                 {"scans/c.json", text("[1, 2]")},
                                 {"scans/c.jpg", test::distinct_bytes(3)},
                             });
  const TarShards shards(dir / "seg.tar", no_fallback());
  ASSERT_EQ(shards.size(), 3u);

  const Sample a = shards.read(0);
  EXPECT_EQ(test::to_vector(a.bytes), test::distinct_bytes(1));
  EXPECT_EQ(test::to_vector(a.mask), mask);
  EXPECT_EQ(a.mask_name, (dir / "seg.tar").string() + "#scans/a.mask.png");
  EXPECT_EQ(a.label, 2);
  ASSERT_EQ(a.targets.size(), 2u);  // "caption" is not a number
  EXPECT_EQ(a.targets.at("age"), (Target{{}, {63.0F}}));
  EXPECT_EQ(a.targets.at("box"), (Target{{4}, {1.0F, 2.5F, 3.0F, 4.0F}}));

  const Sample b = shards.read(1);
  EXPECT_TRUE(b.mask.empty());
  EXPECT_TRUE(b.targets.empty());
  EXPECT_EQ(b.label, -1);
  EXPECT_EQ(shards.classes(), (std::vector<std::string>{"0", "1", "2"}));

  EXPECT_THAT(test::error_message([&] { shards.read(2); }),
              HasSubstr((dir / "seg.tar").string() + "#scans/c.json: not a JSON object"));

  EXPECT_EQ(shards.unused_fields(), (std::map<std::string, std::size_t>{{"txt", 2}}));
  EXPECT_THAT(reasons(shards).at((dir / "seg.tar").string() + "#scans/a.txt"),
              HasSubstr("field 'txt' is not read (2 members have it)"));
}

TEST(TarShards, SamplesWithoutAnImageOrWithABadLabelAreListedWithTheReason) {
  TempDir dir;
  write_tar(dir / "x.tar", {
                               {"k0.jpg", test::distinct_bytes(0)},
                               {"k1.cls", text("1")},
                               {"k1.json", text("{}")},
                               {"k2.jpg", test::distinct_bytes(2)},
                               {"k2.cls", text("cat")},
                               {"k3.JPG", test::distinct_bytes(3)},  // extensions match in any case
                               {"README", text("no field")},
                               {"dir/.hidden.jpg", test::distinct_bytes(4)},
                           });
  const TarShards shards(dir / "x.tar", no_fallback());
  EXPECT_EQ(keys(shards), (std::vector<std::string>{"k0", "k3"}));
  EXPECT_TRUE(shards.classes().empty());
  const std::string shard = (dir / "x.tar").string();
  const auto why = reasons(shards);
  EXPECT_THAT(why.at(shard + "#k1"), HasSubstr("no image member (its fields: cls json"));
  EXPECT_THAT(why.at(shard + "#k2.cls"), HasSubstr("not a decimal class label"));
  EXPECT_THAT(why.at(shard + "#README"), HasSubstr("no field"));
  EXPECT_THAT(why.at(shard + "#dir/.hidden.jpg"), HasSubstr("hidden"));
}

// ---- the index -------------------------------------------------------------------------------

TEST(TarShards, IndexIsWrittenOnceReusedAndRebuiltWhenTheShardChanges) {
  TempDir dir;
  const fs::path shard = dir / "s.tar";
  const fs::path index = tar_index_path(shard);
  write_tar(shard, labelled_samples(4));

  {
    const TarShards first(shard, no_fallback());
    ASSERT_EQ(first.shards().size(), 1u);
    EXPECT_EQ(first.shards()[0].source, TarIndexSource::written);
    EXPECT_EQ(first.shards()[0].index, index);
    EXPECT_EQ(first.size(), 4u);
  }
  ASSERT_TRUE(fs::exists(index));
  const auto written_at = fs::last_write_time(index);
  const std::vector<std::byte> written = read_file(index.string());

  {
    const TarShards second(shard, no_fallback());
    EXPECT_EQ(second.shards()[0].source, TarIndexSource::loaded);
    EXPECT_EQ(second.size(), 4u);
    EXPECT_EQ(test::to_vector(second.read(3).bytes), test::small_jpeg(3));
  }
  EXPECT_EQ(fs::last_write_time(index), written_at);
  EXPECT_EQ(read_file(index.string()), written);

  // Another shard under the same name (another size): rebuilt.
  write_tar(shard, labelled_samples(5));
  {
    const TarShards changed(shard, no_fallback());
    EXPECT_EQ(changed.shards()[0].source, TarIndexSource::written);
    EXPECT_EQ(changed.size(), 5u);
    EXPECT_EQ(test::to_vector(changed.read(4).bytes), test::small_jpeg(4));
  }
  // The same size, a new modification time: rebuilt.
  fs::last_write_time(shard, fs::last_write_time(shard) + std::chrono::seconds(5));
  EXPECT_EQ(TarShards(shard, no_fallback()).shards()[0].source, TarIndexSource::written);
  EXPECT_EQ(TarShards(shard, no_fallback()).shards()[0].source, TarIndexSource::loaded);

  // A damaged index: rebuilt, not trusted.
  std::vector<std::byte> damaged = read_file(index.string());
  damaged[70] ^= std::byte{0x40};
  test::write_bytes(index, damaged);
  const TarShards repaired(shard, no_fallback());
  EXPECT_EQ(repaired.shards()[0].source, TarIndexSource::written);
  EXPECT_EQ(repaired.size(), 5u);
}

// Found by tar_index_fuzz (nodes/fuzz): an index whose .cls entry held a label above 999999 was
// loaded, and classes() then made a name for every number up to it (2^31 - 1: out of memory).
TEST(TarShards, AnIndexWithALabelOutOfRangeIsRebuilt) {
  TempDir dir;
  const fs::path shard = dir / "s.tar";
  const fs::path index = tar_index_path(shard);
  write_tar(shard, labelled_samples(1));
  ASSERT_EQ(TarShards(shard, no_fallback()).shards()[0].source, TarIndexSource::written);

  // The .cls entry (value 0) given label 2^31 - 1, and the checksum (FNV-1a 64, at 56) repaired.
  std::vector<std::byte> bytes = read_file(index.string());
  const auto u32_at = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = v << 8 | std::to_integer<std::uint32_t>(bytes[at + static_cast<std::size_t>(i)]);
    return v;
  };
  const std::size_t entries = u32_at(32);
  ASSERT_EQ(entries, 2u);
  const std::size_t value_at = u32_at(64 + 40 + 36) == 0 ? 64 + 40 + 36 : 64 + 36;
  ASSERT_EQ(u32_at(value_at), 0u);
  for (std::size_t i = 0; i < 4; ++i) bytes[value_at + i] = std::byte{static_cast<unsigned char>(i == 3 ? 0x7f : 0xff)};
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const unsigned byte = i >= 56 && i < 64 ? 0U : std::to_integer<unsigned>(bytes[i]);
    hash = (hash ^ byte) * 0x100000001b3ULL;
  }
  for (std::size_t i = 0; i < 8; ++i) bytes[56 + i] = std::byte{static_cast<unsigned char>(hash >> (8 * i))};
  test::write_bytes(index, bytes);

  const TarShards reopened(shard, no_fallback());
  EXPECT_EQ(reopened.shards()[0].source, TarIndexSource::written);
  ASSERT_EQ(reopened.size(), 1u);
  EXPECT_EQ(reopened.label(0), 0);
  EXPECT_EQ(reopened.classes().size(), 1u);
}

TEST(TarShards, IndexGoesToTheCacheFolderWhenItCannotGoBesideTheShard) {
  TempDir dir;
  const fs::path shard = dir / "s.tar";
  write_tar(shard, labelled_samples(2));
  fs::create_directories(tar_index_path(shard));  // a folder in the index file's place: not writable

  TarShardsOptions options;
  options.fallback_index_dir = dir / "cache";
  const TarShards first(shard, options);
  EXPECT_EQ(first.shards()[0].source, TarIndexSource::written);
  EXPECT_EQ(first.shards()[0].index.parent_path(), dir / "cache");
  EXPECT_THAT(first.shards()[0].index.filename().string(), HasSubstr("s.tar.stoke-idx"));
  EXPECT_EQ(TarShards(shard, options).shards()[0].source, TarIndexSource::loaded);

  // Nowhere to write: in memory, or an error when that is not allowed.
  const TarShards in_memory(shard, no_fallback());
  EXPECT_EQ(in_memory.shards()[0].source, TarIndexSource::memory);
  EXPECT_TRUE(in_memory.shards()[0].index.empty());
  EXPECT_EQ(in_memory.size(), 2u);
  TarShardsOptions strict = no_fallback();
  strict.allow_memory_index = false;
  EXPECT_THAT(test::error_message([&] { TarShards(shard, strict); }),
              HasSubstr("cannot write an index of shard '" + shard.string() + "'"));

  // An index folder of one's own; and no index file at all.
  TarShardsOptions own;
  own.index_dir = dir / "indexes";
  EXPECT_EQ(TarShards(shard, own).shards()[0].index.parent_path(), dir / "indexes");
  EXPECT_EQ(TarShards(shard, own).shards()[0].source, TarIndexSource::loaded);
  TarShardsOptions unwritten;
  unwritten.index_dir = dir / "never";
  unwritten.write_index = false;
  EXPECT_EQ(TarShards(shard, unwritten).shards()[0].source, TarIndexSource::memory);
  EXPECT_FALSE(fs::exists(dir / "never"));
}

// ---- damage ----------------------------------------------------------------------------------

TEST(TarShards, AShardCutMidMemberKeepsTheSamplesBeforeTheCutAndTheOtherShards) {
  TempDir dir;
  write_tar(dir / "a.tar", labelled_samples(6));
  write_tar(dir / "b.tar", labelled_samples(2, 100));
  const std::size_t at = find_in_file(dir / "a.tar", test::small_jpeg(3));
  fs::resize_file(dir / "a.tar", at + 100);  // inside s3.jpg's bytes

  const TarShards shards(std::vector<fs::path>{dir / "a.tar", dir / "b.tar"}, no_fallback());
  EXPECT_EQ(keys(shards), (std::vector<std::string>{"s0", "s1", "s2", "s100", "s101"}));
  const std::string shard = (dir / "a.tar").string();
  const auto why = reasons(shards);
  ASSERT_TRUE(why.contains(shard + "#s3.jpg")) << ::testing::PrintToString(why);
  EXPECT_THAT(why.at(shard + "#s3.jpg"), HasSubstr("cut short"));
  EXPECT_THAT(why.at(shard + "#s3.jpg"), HasSubstr("from byte " + std::to_string(at)));
  for (std::size_t i = 0; i < shards.size(); ++i) EXPECT_NO_THROW(shards.read(i));

  // The damage is remembered by the index file too.
  const TarShards again(std::vector<fs::path>{dir / "a.tar", dir / "b.tar"}, no_fallback());
  EXPECT_EQ(again.shards()[0].source, TarIndexSource::loaded);
  EXPECT_EQ(keys(again), keys(shards));
  EXPECT_EQ(reasons(again), why);

  // Cut inside a header: the sample before it may have had more members, so it is left out too.
  write_tar(dir / "c.tar", labelled_samples(6));
  const std::size_t header = find_in_file(dir / "c.tar", test::small_jpeg(3)) - 512;
  fs::resize_file(dir / "c.tar", header + 100);
  const TarShards cut_header(dir / "c.tar", no_fallback());
  EXPECT_EQ(keys(cut_header), (std::vector<std::string>{"s0", "s1"}));
  const auto header_why = reasons(cut_header);
  EXPECT_THAT(header_why.at((dir / "c.tar").string()), HasSubstr("unreadable tar header after 's2.cls'"));
  EXPECT_THAT(header_why.at((dir / "c.tar").string() + "#s2"), HasSubstr("may have cut one of its members"));
}

TEST(TarShards, ADamagedHeaderIsListedAndReadingGoesOnAtTheNextHeader) {
  TempDir dir;
  const fs::path file = dir / "a.tar";
  write_tar(file, labelled_samples(6));
  // s3.jpg's ustar header is the 512 bytes before its data; break its name and checksum.
  const std::size_t header = find_in_file(file, test::small_jpeg(3)) - 512;
  std::vector<std::byte> bytes = read_file(file.string());
  bytes[header] ^= std::byte{0x20};
  test::write_bytes(file, bytes);

  const TarShards shards(file, no_fallback());
  // s2 was in progress at the damage (it might have lost a member), s3 lost its image.
  EXPECT_EQ(keys(shards), (std::vector<std::string>{"s0", "s1", "s4", "s5"}));
  const auto why = reasons(shards);
  EXPECT_THAT(why.at(file.string()), HasSubstr("damaged tar header at byte " + std::to_string(header)));
  EXPECT_THAT(why.at(file.string() + "#s2"), HasSubstr("may have cut one of its members"));
  EXPECT_THAT(why.at(file.string() + "#s3"), HasSubstr("no image member"));
  EXPECT_EQ(test::to_vector(shards.read(2).bytes), test::small_jpeg(4));
}

TEST(TarShards, ReadOfAMemberCutAfterOpeningThrowsNamingShardAndMember) {
  TempDir dir;
  const fs::path file = dir / "a.tar";
  write_tar(file, labelled_samples(4));
  const TarShards shards(file, no_fallback());
  fs::resize_file(file, find_in_file(file, test::small_jpeg(3)) + 10);
  EXPECT_EQ(test::to_vector(shards.read(0).bytes), test::small_jpeg(0));
  const std::string message = test::error_message([&] { shards.read(3); });
  EXPECT_THAT(message, HasSubstr(file.string() + "#s3.jpg: "));
  EXPECT_THAT(message, HasSubstr("not all in the shard"));
}

TEST(TarShards, InAPipelineReadItemsAreDecodedOrSkippedByName) {
  TempDir dir;
  const fs::path file = dir / "a.tar";
  write_tar(file, labelled_samples(12));
  const auto shards = std::make_shared<const TarShards>(file, no_fallback());
  ASSERT_EQ(shards->size(), 12u);
  fs::resize_file(file, find_in_file(file, test::small_jpeg(9)) + 10);  // s9 .. s11 lost after opening

  const Decoder decoder;
  std::set<std::uint64_t> decoded;
  graph::Pipeline pipe({.max_in_flight = 8, .threads = 4});
  pipe.source("items", DatasetSource(shards->size(), {.shuffle = true, .seed = 3}))
      .map("read", ReadSample(shards), {.concurrency = graph::parallel(2), .on_error = graph::OnError::skip})
      .map("decode", [&decoder](Sample sample) { return decoder.decode(sample); },
           {.concurrency = graph::parallel(2), .on_error = graph::OnError::skip})
      .sink("collect", [&](Image image) { decoded.insert(image.index); });
  const graph::RunReport report = pipe.run();

  EXPECT_EQ(report.produced, 12u);
  EXPECT_EQ(report.consumed, decoded.size());
  EXPECT_EQ(report.produced, report.consumed + report.skipped);
  EXPECT_EQ(decoded.size(), 9u);
  ASSERT_EQ(report.skipped_items.size(), 3u);
  for (const graph::SkippedItem& item : report.skipped_items) {
    EXPECT_EQ(item.stage, "read");
    EXPECT_THAT(item.reason, HasSubstr(file.string() + "#s"));
  }
}

TEST(TarShards, AFileThatIsNotATarIsListedAndTheOtherShardsAreRead) {
  TempDir dir;
  write_tar(dir / "good.tar", labelled_samples(2));
  test::write_text(dir / "junk.tar", std::string(3000, 'x'));
  test::write_text(dir / "empty.tar", "");
  const TarShards shards(dir.path(), no_fallback());
  EXPECT_EQ(shards.size(), 2u);
  const auto why = reasons(shards);
  EXPECT_THAT(why.at((dir / "junk.tar").string()), HasSubstr("not readable as a tar archive"));
  EXPECT_THAT(why.at((dir / "empty.tar").string()), HasSubstr("empty file"));

  EXPECT_THAT(test::error_message([&] { TarShards(dir / "junk.tar", no_fallback()); }),
              HasSubstr("no sample in 1 shard '" + (dir / "junk.tar").string() + "'"));
}

TEST(TarShards, ACompressedShardIsRefusedNamingIt) {
  TempDir dir;
  write_tar(dir / "a.tar.gz", labelled_samples(2), /*gzip=*/true);
  const std::string message = test::error_message([&] { TarShards(dir / "a.tar.gz", no_fallback()); });
  EXPECT_THAT(message, HasSubstr((dir / "a.tar.gz").string() + ": compressed with gzip"));
  EXPECT_THAT(message, HasSubstr("must be uncompressed"));

  // Whatever its name says.
  fs::copy_file(dir / "a.tar.gz", dir / "b.tar");
  EXPECT_THAT(test::error_message([&] { TarShards(dir / "b.tar", no_fallback()); }),
              HasSubstr((dir / "b.tar").string() + ": compressed with gzip"));

  // A folder of compressed shards only.
  fs::create_directories(dir / "gz");
  fs::rename(dir / "a.tar.gz", dir / "gz" / "a.tar.gz");
  EXPECT_THAT(test::error_message([&] { TarShards(dir / "gz", no_fallback()); }),
              HasSubstr("compressed shards (a.tar.gz) cannot be read by offset"));
}

TEST(TarShards, AShardGivenTwiceOrMissingIsAnError) {
  TempDir dir;
  write_tar(dir / "a.tar", labelled_samples(1));
  EXPECT_THAT(test::error_message([&] {
                TarShards({dir / "a.tar", dir / "." / "a.tar"}, no_fallback());
              }),
              HasSubstr("is given twice"));
  EXPECT_THAT(test::error_message([&] { TarShards(dir / "missing.tar", no_fallback()); }),
              HasSubstr("'" + (dir / "missing.tar").string() + "' does not exist"));
}

// ---- patterns --------------------------------------------------------------------------------

// ---- remote shards: range_server.py on the loopback interface serves a folder of shards

class RemoteTarShards : public ::testing::Test {
 protected:
  void SetUp() override {
    write_tar(dir_ / "served" / "a.tar", labelled_samples(4, 0));
    write_tar(dir_ / "served" / "b.tar", labelled_samples(3, 4));
    server_ = std::make_unique<remote::RangeServer>(dir_ / "served");
  }
  fs::path url(const std::string& name) const { return fs::path(server_->url("/files/" + name).text()); }
  TarShardsOptions index_in(const std::string& folder) const {
    TarShardsOptions options;
    options.index_dir = dir_ / folder;
    return options;
  }

  TempDir dir_;
  std::unique_ptr<remote::RangeServer> server_;
};

TEST_F(RemoteTarShards, GiveTheSameSamplesAsTheSameShardsOnDisk) {
  // The local open keeps its index files elsewhere, so the server has none beside the shards.
  const TarShards local({dir_ / "served" / "a.tar", dir_ / "served" / "b.tar"}, index_in("local-index"));
  const TarShards remote({url("b.tar"), url("a.tar")}, index_in("remote-index"));
  ASSERT_EQ(remote.size(), local.size());
  EXPECT_EQ(keys(remote), keys(local));
  for (std::size_t i = 0; i < remote.size(); ++i) {
    EXPECT_EQ(remote.label(i), local.label(i)) << i;
    EXPECT_EQ(test::to_vector(remote.read(i).bytes), test::to_vector(local.read(i).bytes)) << i;
  }
  EXPECT_EQ(remote.name(0), url("a.tar").string() + "#s0");
  ASSERT_EQ(remote.shards().size(), 2u);
  EXPECT_EQ(remote.shards()[0].source, TarIndexSource::written) << "indexed from one download, kept locally";
  EXPECT_EQ(remote.shards()[1].bytes, fs::file_size(dir_ / "served" / "b.tar"));
  const TarShards again({url("a.tar"), url("b.tar")}, index_in("remote-index"));
  EXPECT_EQ(again.shards()[0].source, TarIndexSource::loaded) << "the second open downloads nothing";
  EXPECT_EQ(again.shards()[0].index.parent_path(), dir_ / "remote-index");
}

TEST_F(RemoteTarShards, TheIndexBesideTheShardOnTheServerIsTaken) {
  (void)TarShards(dir_ / "served" / "a.tar", no_fallback());  // writes served/a.tar.stoke-idx
  ASSERT_TRUE(fs::exists(dir_ / "served" / "a.tar.stoke-idx"));
  const TarShards remote(std::vector<fs::path>{url("a.tar")}, index_in("unused"));
  EXPECT_EQ(remote.shards()[0].source, TarIndexSource::loaded);
  EXPECT_EQ(remote.shards()[0].index, url("a.tar.stoke-idx"));
  EXPECT_FALSE(fs::exists(dir_ / "unused")) << "no download, no local index";
  EXPECT_EQ(test::to_vector(remote.read(3).bytes), test::small_jpeg(3));
}

TEST_F(RemoteTarShards, AMissingShardAndAShardCutOnTheServerAreNamed) {
  const std::string missing = test::error_message([&] { TarShards(std::vector<fs::path>{url("missing.tar")}); });
  EXPECT_THAT(missing, HasSubstr(url("missing.tar").string()));
  EXPECT_THAT(missing, HasSubstr("404"));

  const TarShards remote({url("a.tar"), url("b.tar")}, index_in("index"));
  const fs::path b = dir_ / "served" / "b.tar";
  fs::resize_file(b, find_in_file(b, test::small_jpeg(6)) + 10);
  EXPECT_EQ(test::to_vector(remote.read(4).bytes), test::small_jpeg(4));
  const std::string cut = test::error_message([&] { remote.read(6); });
  EXPECT_THAT(cut, HasSubstr(url("b.tar").string() + "#s6.jpg: "));
}

TEST_F(RemoteTarShards, TheRegistryOpensAUrlAndABracePatternOfUrls) {
  const std::string base = server_->url("/files/").text();
  const DatasetPtr one = DatasetRegistry::builtin().open(url("a.tar"));
  EXPECT_EQ(one->size(), 4u);
  const DatasetPtr both = DatasetRegistry::builtin().open(fs::path(base + "{a,b}.tar"));
  EXPECT_EQ(both->size(), 7u);
  const std::string wildcard = test::error_message([&] { (void)expand_shard_pattern(base + "*.tar"); });
  EXPECT_THAT(wildcard, HasSubstr("name remote shards with braces"));
}

TEST_F(RemoteTarShards, ReadOnThreadsReadsManyAtOnceAndAccountsForEveryItem) {
  const auto remote =
      std::make_shared<const TarShards>(std::vector<fs::path>{url("a.tar"), url("b.tar")}, index_in("index"));
  const fs::path b = dir_ / "served" / "b.tar";
  fs::resize_file(b, find_in_file(b, test::small_jpeg(5)) + 10);  // s5, s6 lost on the server after opening

  std::map<std::uint64_t, std::vector<std::byte>> read;
  graph::Pipeline pipe({.max_in_flight = 8, .threads = 2});
  pipe.source("items", DatasetSource(remote->size(), {.shuffle = true, .seed = 3}))
      .async<Sample>("read", ReadOnThreads(remote, 4),
                     {.concurrency = graph::parallel(4), .on_error = graph::OnError::skip})
      .sink("collect", [&](Sample sample) { read[sample.index] = test::to_vector(sample.bytes); });
  const graph::RunReport report = pipe.run();

  EXPECT_EQ(report.produced, 7u);
  EXPECT_EQ(report.produced, report.consumed + report.skipped) << "read = passed on + skipped";
  ASSERT_EQ(read.size(), 5u);
  for (const auto& [index, bytes] : read) EXPECT_EQ(bytes, test::small_jpeg(static_cast<int>(index))) << index;
  ASSERT_EQ(report.skipped_items.size(), 2u);
  for (const graph::SkippedItem& item : report.skipped_items) {
    EXPECT_EQ(item.stage, "read");
    EXPECT_THAT(item.reason, HasSubstr(url("b.tar").string() + "#s"));
  }
}

TEST_F(RemoteTarShards, ASampleWithAMaskAndTargetsIsOneRangeRequest) {
  const std::vector<std::byte> image = test::small_jpeg(1), mask = test::small_jpeg(2);
  write_tar(dir_ / "served" / "seg.tar", {{"a.jpg", image},
                                          {"a.txt", text("a field not read, between the others")},
                                          {"a.mask.png", mask},
                                          {"a.json", text(R"({"age": 63})")},
                                          {"b.jpg", image}});
  TarShardsOptions options = index_in("index");
  const TarShards remote(std::vector<fs::path>{url("seg.tar")}, options);
  const std::uint64_t before = remote.network().value().requests;
  const Sample a = remote.read(0);
  EXPECT_EQ(remote.network().value().requests - before, 1u) << "image, mask and .json in one request";
  EXPECT_EQ(test::to_vector(a.bytes), image);
  EXPECT_EQ(test::to_vector(a.mask), mask);
  EXPECT_EQ(a.targets.at("age").values, std::vector<float>{63});
  EXPECT_EQ(test::to_vector(remote.read(1).bytes), image);
}

TEST_F(RemoteTarShards, AShardThatCannotBeOpenedIsLeftOutAndNamedWhenThePolicySaysSkip) {
  TarShardsOptions options = index_in("index");
  options.on_shard_error = ShardFailure::skip;
  const TarShards shards({url("a.tar"), url("missing.tar"), url("forbidden.tar"), dir_ / "gone.tar"}, options);
  EXPECT_EQ(shards.size(), 4u) << "a.tar's samples";
  const std::map<std::string, std::string> left_out = reasons(shards);
  ASSERT_TRUE(left_out.count(url("missing.tar").string())) << "named by its URL";
  EXPECT_THAT(left_out.at(url("missing.tar").string()), HasSubstr("shard left out"));
  EXPECT_THAT(left_out.at(url("missing.tar").string()), HasSubstr("404"));
  EXPECT_THAT(left_out.at((dir_ / "gone.tar").string()), HasSubstr("does not exist"));
  // The default fails, naming the shard.
  EXPECT_THAT(test::error_message([&] {
                TarShards({url("a.tar"), url("missing.tar")}, index_in("index"));
              }),
              HasSubstr(url("missing.tar").string()));
}

TEST_F(RemoteTarShards, AServerThatStopsAnsweringMidShardFailsTheReadWithinTheStallLimit) {
  (void)TarShards(dir_ / "served" / "a.tar", no_fallback());  // the index beside it comes whole
  TarShardsOptions options = index_in("unused");
  options.stall_limit = std::chrono::milliseconds(300);
  options.retries = 0;
  const fs::path stalled(server_->url("/stall/a.tar").text());
  const TarShards shards(std::vector<fs::path>{stalled}, options);
  const std::string message = test::error_message([&] { shards.read(0); });  // the server sleeps 60 s
  EXPECT_THAT(message, HasSubstr(stalled.string() + "#s0.jpg: "));
  EXPECT_THAT(message, HasSubstr("no data for 300 ms (the stall limit)"));
}

// With a cache folder: whole shards downloaded once, kept, and read from there.
TEST_F(RemoteTarShards, ACacheFolderGivesTheSameSamplesAndAnotherOpenDownloadsNothing) {
  const TarShards local({dir_ / "served" / "a.tar", dir_ / "served" / "b.tar"}, index_in("local-index"));
  TarShardsOptions options = index_in("remote-index");
  options.cache_dir = dir_ / "cache";
  options.cache_bytes = 1 << 20;
  const TarShards remote({url("a.tar"), url("b.tar")}, options);
  for (std::size_t i = 0; i < remote.size(); ++i) {
    EXPECT_EQ(test::to_vector(remote.read(i).bytes), test::to_vector(local.read(i).bytes)) << i;
  }
  const NetworkStats first = remote.network().value();
  EXPECT_TRUE(first.cached);
  EXPECT_EQ(first.cache_misses, 2u) << "each shard downloaded once, to index it";
  EXPECT_EQ(first.cache_hits, remote.size()) << "every member read from the folder";
  EXPECT_EQ(first.cache_bytes, fs::file_size(dir_ / "served" / "a.tar") + fs::file_size(dir_ / "served" / "b.tar"));

  const TarShards again({url("a.tar"), url("b.tar")}, options);  // a new run: index and shards kept
  for (std::size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again.read(i).bytes.size(), local.read(i).bytes.size());
  const NetworkStats second = again.network().value();
  EXPECT_EQ(second.cache_misses + second.cache_prefetched, 0u);
  EXPECT_LT(second.bytes, 1000u) << "no shard downloaded again";
  EXPECT_FALSE(local.network().has_value()) << "local shards read nothing over the network";
}

TEST_F(RemoteTarShards, TheCacheBudgetHoldsWhileFourThreadsReadInRandomOrder) {
  write_tar(dir_ / "served" / "c.tar", labelled_samples(5, 7));
  write_tar(dir_ / "served" / "d.tar", labelled_samples(6, 12));
  const std::vector<fs::path> urls{url("a.tar"), url("b.tar"), url("c.tar"), url("d.tar")};
  (void)TarShards(urls, index_in("index"));  // indexes made beforehand: the budget holds two shards only
  std::uint64_t largest = 0;
  for (const char* name : {"a.tar", "b.tar", "c.tar", "d.tar"})
    largest = std::max<std::uint64_t>(largest, fs::file_size(dir_ / "served" / name));
  TarShardsOptions options = index_in("index");
  options.cache_dir = dir_ / "cache";
  options.cache_bytes = 2 * largest;
  const TarShards shards(urls, options);

  std::atomic<bool> done{false};
  std::uint64_t most_on_disk = 0;
  std::thread watcher([&] {  // the folder's bytes, checked while the readers run
    while (!done) {
      std::uint64_t bytes = 0;
      std::error_code error;
      for (const fs::directory_entry& file : fs::directory_iterator(dir_ / "cache", error)) {
        const std::uintmax_t size = file.file_size(error);  // a file renamed or evicted meanwhile: gone
        if (!error) bytes += size;
      }
      most_on_disk = std::max(most_on_disk, bytes);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  const std::vector<std::uint64_t> order = EpochOrder(shards.size(), {.shuffle = true, .seed = 5}).indices(0);
  std::atomic<std::size_t> next{0}, read{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      for (std::size_t k = next++; k < order.size(); k = next++) {
        if (shards.read(order[k]).bytes.size() == test::small_jpeg(static_cast<int>(order[k])).size()) ++read;
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  done = true;
  watcher.join();
  EXPECT_EQ(read.load(), shards.size());
  EXPECT_LE(most_on_disk, options.cache_bytes);
  const NetworkStats stats = shards.network().value();
  EXPECT_LE(stats.cache_peak_bytes, options.cache_bytes);
  EXPECT_GT(stats.cache_evictions, 0u) << "four shards through a folder that holds two";
}

TEST_F(RemoteTarShards, AResumedEpochFetchesOnlyTheItemsStillToRead) {
  const std::vector<fs::path> urls{url("a.tar"), url("b.tar")};
  (void)TarShards(urls, index_in("index"));
  const std::vector<std::uint64_t> order = EpochOrder(7, {.shuffle = true, .seed = 3}).indices(0);
  TarShardsOptions no_prefetch = index_in("index");
  no_prefetch.prefetch = false;
  const TarShards resumed(urls, no_prefetch);
  const NetworkStats opened = resumed.network().value();
  std::uint64_t bytes = 0;
  for (std::size_t k = 4; k < order.size(); ++k) bytes += resumed.read(order[k]).bytes.size();  // from position 4
  const NetworkStats after = resumed.network().value();
  EXPECT_EQ(after.requests - opened.requests, order.size() - 4) << "one range request per item left";
  EXPECT_EQ(after.bytes - opened.bytes, bytes);

  // With a cache, a run killed after the first shard was kept fetches only the other.
  TarShardsOptions cached = no_prefetch;
  cached.cache_dir = dir_ / "cache";
  cached.cache_bytes = 1 << 20;
  {
    const TarShards killed(urls, cached);
    (void)killed.read(0);  // a.tar
  }
  const TarShards restarted(urls, cached);
  for (std::size_t i = 0; i < restarted.size(); ++i) (void)restarted.read(i);
  const NetworkStats kept = restarted.network().value();
  EXPECT_EQ(kept.cache_misses, 1u) << "b.tar only";
  EXPECT_EQ(kept.bytes, fs::file_size(dir_ / "served" / "b.tar"));
}

// ---- remote shards streamed into memory (a window, no cache folder)

class StreamedTarShards : public RemoteTarShards {
 protected:
  void SetUp() override {
    RemoteTarShards::SetUp();
    write_tar(dir_ / "served" / "c.tar", labelled_samples(5, 7));
    write_tar(dir_ / "served" / "d.tar", labelled_samples(6, 12));
    for (const char* name : {"a.tar", "b.tar", "c.tar", "d.tar"}) {
      urls_.push_back(url(name));
      paths_.push_back(dir_ / "served" / name);
      largest_ = std::max<std::uint64_t>(largest_, fs::file_size(paths_.back()));
      total_ += fs::file_size(paths_.back());
    }
    (void)TarShards(urls_, index_in("index"));  // indexes made beforehand: no download at the open
  }
  // Waits (up to 10 s) until the stream has downloaded `shards` shards.
  static NetworkStats streamed(const Dataset& dataset, std::uint64_t shards) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (dataset.network().value().stream_shards < shards && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return dataset.network().value();
  }

  std::vector<fs::path> urls_, paths_;
  std::uint64_t largest_ = 0, total_ = 0;
};

TEST_F(StreamedTarShards, AWindowStreamsWholeShardsAheadOfTheReadsInTheSameOrderAsOnDisk) {
  TarShardsOptions options = index_in("index");
  options.window = 2;
  options.memory_bytes = total_;  // every shard fits
  const auto shards = std::make_shared<const TarShards>(urls_, options);
  TarShardsOptions on_disk = index_in("local-index");
  on_disk.window = 2;
  const TarShards local(paths_, on_disk);
  const OrderOptions order{.shuffle = true, .seed = 9, .groups = shards->groups()};
  ASSERT_EQ(order.groups.window, 2u);
  EXPECT_EQ(EpochOrder(shards->size(), order).indices(0),
            EpochOrder(local.size(), {.shuffle = true, .seed = 9, .groups = local.groups()}).indices(0));

  const NetworkStats opened = shards->network().value();
  EXPECT_EQ(opened.stream_budget, total_);
  DatasetSource source(shards, order);
  std::optional<ItemRef> ref = source();  // tells the dataset the epoch's order: the downloads start
  const NetworkStats ready = streamed(*shards, 4);
  ASSERT_EQ(ready.stream_shards, 4u);
  EXPECT_EQ(ready.requests - opened.requests, 4u) << "one request per shard";
  for (; ref; ref = source()) {
    const std::size_t i = ref->index;
    EXPECT_EQ(test::to_vector(shards->read(i).bytes), test::to_vector(local.read(i).bytes)) << i;
  }
  const NetworkStats after = shards->network().value();
  EXPECT_EQ(after.requests, ready.requests) << "every read from memory";
  EXPECT_EQ(after.stream_peak_bytes, total_);
}

TEST_F(StreamedTarShards, TheStreamStaysWithinItsBudgetWhileThreadsReadAnEpoch) {
  TarShardsOptions options = index_in("index");
  options.window = 2;
  options.memory_bytes = 2 * largest_;  // two shards at a time, for a window of two
  const auto shards = std::make_shared<const TarShards>(urls_, options);
  DatasetSource source(shards, {.shuffle = true, .seed = 3, .groups = shards->groups()}, /*epochs=*/2);
  std::mutex mutex;
  std::atomic<std::size_t> read{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (true) {
        std::optional<ItemRef> ref;
        {
          const std::lock_guard lock(mutex);
          ref = source();
        }
        if (!ref) return;
        const Sample sample = shards->read(ref->index);
        if (test::to_vector(sample.bytes) == test::small_jpeg(static_cast<int>(ref->index))) ++read;
      }
    });
  }
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(read.load(), 2 * shards->size());
  const NetworkStats stats = shards->network().value();
  EXPECT_LE(stats.stream_peak_bytes, options.memory_bytes);
  EXPECT_GT(stats.stream_shards, 0u);
}

TEST_F(StreamedTarShards, WithoutAWindowOrATellingSourceEveryReadIsARangeRequest) {
  TarShardsOptions options = index_in("index");
  options.memory_bytes = total_;
  const auto no_window = std::make_shared<const TarShards>(urls_, options);
  EXPECT_EQ(no_window->network().value().stream_budget, 0u) << "no window, no stream";
  options.window = 2;
  const TarShards untold(urls_, options);
  const NetworkStats opened = untold.network().value();
  for (std::size_t i = 0; i < untold.size(); ++i) (void)untold.read(i);
  EXPECT_EQ(untold.network().value().requests - opened.requests, untold.size()) << "nothing planned: range reads";
  EXPECT_EQ(untold.network().value().stream_shards, 0u);
}

TEST_F(RemoteTarShards, TheRegistryTakesTheCacheAndThePolicyAsParameters) {
  const std::string base = server_->url("/files/").text();
  const std::string spec = "tar cache=" + (dir_ / "cache").string() + " cache_bytes=1M on_shard_error=skip";
  const DatasetPtr both = DatasetRegistry::builtin().open(fs::path(base + "{a,b,c}.tar"), spec);
  EXPECT_EQ(both->size(), 7u) << "c.tar is missing: left out";
  EXPECT_TRUE(both->network().value().cached);
  EXPECT_THAT(test::error_message([&] { DatasetRegistry::builtin().open(url("a.tar"), "tar cache_bytes=lots"); }),
              HasSubstr("cache_bytes='lots' is not a size"));
  EXPECT_THAT(test::error_message([&] { DatasetRegistry::builtin().open(url("a.tar"), "tar cache_bytes=1M"); }),
              HasSubstr("give cache and cache_bytes together"));
  const DatasetPtr streamed = DatasetRegistry::builtin().open(fs::path(base + "{a,b}.tar"), "tar window=2 memory=1M");
  EXPECT_EQ(streamed->groups().window, 2u);
  EXPECT_EQ(*streamed->groups().starts, (std::vector<std::uint64_t>{0, 4}));
  EXPECT_EQ(streamed->network().value().stream_budget, std::uint64_t{1} << 20);
  EXPECT_THAT(test::error_message([&] { DatasetRegistry::builtin().open(url("a.tar"), "tar memory=lots"); }),
              HasSubstr("memory='lots' is not a size"));
  EXPECT_THAT(test::error_message([&] { DatasetRegistry::builtin().open(url("a.tar"), "tar window=-1"); }),
              HasSubstr("window=-1 is below 0"));
}

// ---- remote shards on an S3-compatible server: s3rver (npm), as ctest's remote.tar_shards_against_s3rver runs it

TEST(S3TarShards, GiveTheSameSamplesAsTheSameShardsOnDiskStreamedOrCached) {
  if (!remote::S3Server::available())
    GTEST_SKIP() << "needs s3rver (STOKE_TEST_S3RVER; ctest's remote.tar_shards_against_s3rver)";
  TempDir dir;
  write_tar(dir / "a.tar", labelled_samples(4, 0));
  write_tar(dir / "b.tar", labelled_samples(3, 4));
  const remote::S3Server server;
  for (const char* name : {"a.tar", "b.tar"})
    server.put(std::string("train/") + name, read_file((dir / name).string()));
  // Credentials and endpoint from the environment, as a user gives them.
  const stoke::test::ScopedEnvironment key("AWS_ACCESS_KEY_ID", "S3RVER"), secret("AWS_SECRET_ACCESS_KEY", "S3RVER"),
      region("AWS_REGION", "us-east-1"), endpoint("AWS_ENDPOINT_URL", server.endpoint());

  TarShardsOptions local_options;
  local_options.index_dir = dir / "local-index";
  const TarShards local({dir / "a.tar", dir / "b.tar"}, local_options);
  for (const bool cached : {false, true}) {
    TarShardsOptions options;
    options.index_dir = dir / "remote-index";
    if (cached) {
      options.cache_dir = dir / "cache";
      options.cache_bytes = 1 << 20;
    }
    const TarShards remote(expand_shard_pattern("s3://shards/train/{a,b}.tar"), options);
    ASSERT_EQ(remote.size(), local.size()) << cached;
    EXPECT_EQ(keys(remote), keys(local));
    for (std::size_t i = 0; i < remote.size(); ++i) {
      EXPECT_EQ(remote.label(i), local.label(i)) << i;
      EXPECT_EQ(test::to_vector(remote.read(i).bytes), test::to_vector(local.read(i).bytes)) << i;
    }
    EXPECT_EQ(remote.name(0), "s3://shards/train/a.tar#s0");
    EXPECT_EQ(remote.network().value().cached, cached);
  }
  const std::string missing = test::error_message([&] { TarShards(std::vector<fs::path>{"s3://shards/train/c.tar"}); });
  EXPECT_THAT(missing, HasSubstr("s3://shards/train/c.tar: not found (HTTP 404)"));
}

TEST(ExpandShardPattern, ExpandsBraceRangesListsAndWildcards) {
  EXPECT_EQ(
      expand_shard_pattern("d/train-{000008..000011}.tar"),
      (std::vector<fs::path>{"d/train-000008.tar", "d/train-000009.tar", "d/train-000010.tar", "d/train-000011.tar"}));
  EXPECT_EQ(expand_shard_pattern("{val,train}-{1..2}.tar"),
            (std::vector<fs::path>{"train-1.tar", "train-2.tar", "val-1.tar", "val-2.tar"}));
  EXPECT_EQ(expand_shard_pattern("plain.tar"), (std::vector<fs::path>{"plain.tar"}));
  EXPECT_THROW(expand_shard_pattern("x-{1..2.tar"), std::invalid_argument);
  EXPECT_THROW(expand_shard_pattern("x-{a..2}.tar"), std::invalid_argument);

  TempDir dir;
  test::write_text(dir / "s-1.tar", "");
  test::write_text(dir / "s-2.tar", "");
  test::write_text(dir / "s-2.txt", "");
  EXPECT_EQ(expand_shard_pattern((dir / "s-*.tar").string()),
            (std::vector<fs::path>{dir / "s-1.tar", dir / "s-2.tar"}));
  EXPECT_THROW(expand_shard_pattern((dir / "none-*.tar").string()), std::runtime_error);
  EXPECT_TRUE(is_tar_shard_name("x/a.tar"));
  EXPECT_TRUE(is_tar_shard_name("a.TAR.gz"));
  EXPECT_FALSE(is_tar_shard_name("a.stoke"));
}

}  // namespace
}  // namespace stoke::nodes
