// TarWriter: shards it writes read back through TarShards as the samples that went in (bytes,
// labels, masks, targets, order); shards are cut at the size and count limits, their sizes are
// what the writer counted, and each is indexed when finished; an unfinished writer leaves nothing.
#include "stoke/nodes/tar_writer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"
#include "stoke/nodes/image_folder.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

TarShardsOptions no_fallback() {
  TarShardsOptions options;
  options.fallback_index_dir.clear();
  return options;
}

/// The names of the files in `dir`, sorted.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

Sample jpeg_sample(int seed, int label, std::size_t size_hint = 0) {
  Sample sample;
  sample.bytes = Bytes(size_hint == 0 ? test::small_jpeg(seed)
                                      : test::distinct_bytes(static_cast<std::uint32_t>(seed), size_hint));
  sample.label = label;
  sample.name = "in/" + std::to_string(seed) + ".jpg";
  return sample;
}

TEST(TarShardPattern, NamesNumberedShardsAndRefusesPatternsThatWouldNotSortOrNotRead) {
  const TarShardPattern numbered("out/train-%06d.tar");
  EXPECT_TRUE(numbered.numbered());
  EXPECT_EQ(numbered.path(0), "out/train-000000.tar");
  EXPECT_EQ(numbered.path(17), "out/train-000017.tar");
  EXPECT_EQ(TarShardPattern("100%%-%02d.tar").path(3), "100%-03.tar");
  const TarShardPattern single("val.tar");
  EXPECT_FALSE(single.numbered());
  EXPECT_EQ(single.path(0), "val.tar");
  EXPECT_THAT(test::error_message([&] { (void)single.path(1); }), HasSubstr("names one shard"));
  EXPECT_THAT(test::error_message([] { (void)TarShardPattern("t-%02d.tar").path(100); }),
              HasSubstr("more than 2 digits"));

  EXPECT_THAT(test::error_message([] { TarShardPattern("train-%d.tar"); }), HasSubstr("zero-padded (e.g. %06d)"));
  EXPECT_THAT(test::error_message([] { TarShardPattern("train-%6d.tar"); }), HasSubstr("zero-padded"));
  EXPECT_THAT(test::error_message([] { TarShardPattern("t-%02d-%02d.tar"); }), HasSubstr("two shard numbers"));
  EXPECT_THAT(test::error_message([] { TarShardPattern("train-%06d"); }), HasSubstr("must end in .tar"));
  EXPECT_THAT(test::error_message([] { TarShardPattern("train-%06d.tar.gz"); }), HasSubstr("must end in .tar"));
  EXPECT_THAT(test::error_message([] { TarShardPattern("train-%s.tar"); }), HasSubstr("'%' must start"));
  EXPECT_THAT(test::error_message([] { TarShardPattern("train-%021d.tar"); }), HasSubstr("width must be 1..20"));
}

TEST(TarKey, IsZeroPaddedToSixDigitsOrToTheCountsWidth) {
  EXPECT_EQ(tar_key(0, 10), "000000");
  EXPECT_EQ(tar_key(17, 1000), "000017");
  EXPECT_EQ(tar_key(17, 1000000), "000017");
  EXPECT_EQ(tar_key(17, 1000001), "0000017");
  EXPECT_EQ(tar_key(1000000, 1000001), "1000000");
}

TEST(TarMembers, HoldTheImageLabelMaskAndTargetsAndRefuseWhatTarShardsCannotGiveBack) {
  Sample sample;
  sample.bytes = Bytes(test::small_jpeg(1));
  sample.name = "photos/Cat.JPEG";
  sample.label = 7;
  sample.mask = Bytes(test::distinct_bytes(5));
  sample.mask_name = "masks/cat.PNG";
  sample.targets["age"] = Target{{}, {63.0F}};
  sample.targets["box"] = Target{{4}, {0.1F, 2.5F, -3.0F, 1e-7F}};
  const std::vector<TarMember> members = tar_members(sample);
  ASSERT_EQ(members.size(), 4u);
  EXPECT_EQ(members[0].field, "jpeg");
  EXPECT_EQ(members[0].bytes.data(), sample.bytes.data()) << "shared, not copied";
  EXPECT_EQ(members[1].field, "cls");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(members[1].bytes.data()), members[1].bytes.size()), "7\n");
  EXPECT_EQ(members[2].field, "mask.png");
  EXPECT_EQ(members[3].field, "json");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(members[3].bytes.data()), members[3].bytes.size()),
            R"({"age":63,"box":[0.1,2.5,-3,1e-07]})");

  // The image's field from its bytes when the name shows none; "jpg" when asked.
  Sample unnamed = jpeg_sample(2, -1);
  unnamed.name = "shard.tar#000017";
  EXPECT_EQ(tar_members(unnamed).front().field, "jpg");
  EXPECT_EQ(tar_members(unnamed).size(), 1u) << "no label, mask or targets";
  EXPECT_EQ(tar_members(unnamed, "png").front().field, "png");
  unnamed.bytes = Bytes(test::distinct_bytes(3));
  EXPECT_THAT(test::error_message([&] { tar_members(unnamed); }), HasSubstr("shard.tar#000017: neither"));

  Sample raw = jpeg_sample(3, 0);
  raw.encoding = Encoding::raw_rgb;
  EXPECT_THAT(test::error_message([&] { tar_members(raw); }), HasSubstr("raw pixels"));
  Sample boxes = jpeg_sample(4, 0);
  boxes.boxes.add({0, 0, 1, 1}, 0);
  EXPECT_THAT(test::error_message([&] { tar_members(boxes); }), HasSubstr("detection boxes"));
  Sample matrix = jpeg_sample(5, 0);
  matrix.targets["m"] = Target{{2, 2}, {1, 2, 3, 4}};
  EXPECT_THAT(test::error_message([&] { tar_members(matrix); }), HasSubstr("target 'm' has 2 dimensions"));
  Sample nan = jpeg_sample(6, 0);
  nan.targets["x"] = Target{{}, {std::numeric_limits<float>::quiet_NaN()}};
  EXPECT_THAT(test::error_message([&] { tar_members(nan); }), HasSubstr("not finite"));
  EXPECT_THAT(test::error_message([&] { tar_members(jpeg_sample(7, 1000000)); }), HasSubstr("above 999999"));
}

TEST(TarWriter, AnImageFolderWrittenAsShardsReadsBackTheSameSamplesInTheSameOrderAndIsIndexed) {
  TempDir dir;
  int seed = 0;
  for (const char* name : {"cat", "dog", "eel"}) {
    for (int i = 0; i < 4; ++i) {
      test::write_bytes(dir / "folder" / name / ("x." + std::to_string(i) + ".jpg"), test::small_jpeg(seed++));
    }
  }
  test::write_bytes(dir / "folder/dog/y.png", test::distinct_bytes(1));  // a name's extension is kept
  const ImageFolder folder(dir / "folder");

  std::vector<TarShardSummary> written;
  {
    fs::create_directories(dir / "shards");
    TarWriter writer(TarShardPattern((dir / "shards/t-%03d.tar").string()), {.shard_samples = 5});
    for (std::size_t i = 0; i < folder.size(); ++i) writer.add(tar_key(i, folder.size()), tar_members(folder.read(i)));
    EXPECT_EQ(writer.samples(), folder.size());
    written = writer.finish();
  }
  ASSERT_EQ(written.size(), 3u);  // 13 samples, 5 a shard
  EXPECT_EQ(written[2].first, 10u);
  EXPECT_EQ(written[2].samples, 3u);
  for (const TarShardSummary& shard : written) {
    EXPECT_EQ(shard.index, tar_index_path(shard.path));
    EXPECT_TRUE(fs::exists(shard.index));
  }
  EXPECT_EQ(files_in(dir / "shards"),
            (std::vector<std::string>{"t-000.tar", "t-000.tar.stoke-idx", "t-001.tar", "t-001.tar.stoke-idx",
                                      "t-002.tar", "t-002.tar.stoke-idx"}));

  const TarShards shards(dir / "shards", no_fallback());
  for (const TarShardInfo& info : shards.shards()) EXPECT_EQ(info.source, TarIndexSource::loaded) << info.path;
  EXPECT_TRUE(shards.ignored().empty()) << shards.ignored().front().path << ": " << shards.ignored().front().reason;
  ASSERT_EQ(shards.size(), folder.size());
  EXPECT_EQ(shards.classes(), (std::vector<std::string>{"0", "1", "2"}));  // numbers: names are not stored
  for (std::size_t i = 0; i < shards.size(); ++i) {
    EXPECT_EQ(test::to_vector(shards.read(i).bytes), test::to_vector(folder.read(i).bytes)) << i;
    EXPECT_EQ(shards.label(i), folder.label(i)) << i;
    EXPECT_EQ(shards.key(i), tar_key(i, folder.size()));
  }
}

TEST(TarWriter, MasksAndTargetsRoundTripThroughTarShards) {
  TempDir dir;
  std::vector<Sample> samples;
  for (int i = 0; i < 3; ++i) {
    Sample sample = jpeg_sample(i, i == 1 ? -1 : i);
    if (i != 2) {
      sample.mask = Bytes(test::distinct_bytes(static_cast<std::uint32_t>(100 + i), 33));
      sample.mask_name = "masks/" + std::to_string(i) + ".png";
    }
    sample.targets["age"] = Target{{}, {static_cast<float>(i) + 0.1F}};
    sample.targets["big"] = Target{{}, {16777216.0F * static_cast<float>(i + 1)}};
    sample.targets["box"] = Target{{3}, {1.0F / 3.0F, -2.0F, 1e30F}};
    sample.targets["none"] = Target{{0}, {}};
    samples.push_back(std::move(sample));
  }
  TarWriter writer(TarShardPattern((dir / "seg.tar").string()));
  for (std::size_t i = 0; i < samples.size(); ++i) writer.add(tar_key(i, samples.size()), tar_members(samples[i]));
  writer.finish();

  const TarShards shards(dir / "seg.tar", no_fallback());
  ASSERT_EQ(shards.size(), samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const Sample back = shards.read(i);
    EXPECT_EQ(test::to_vector(back.bytes), test::to_vector(samples[i].bytes)) << i;
    EXPECT_EQ(back.label, samples[i].label) << i;
    EXPECT_EQ(test::to_vector(back.mask), test::to_vector(samples[i].mask)) << i;
    EXPECT_EQ(back.targets, samples[i].targets) << i;
  }
  EXPECT_THAT(shards.read(0).mask_name, HasSubstr("seg.tar#000000.mask.png"));
  EXPECT_TRUE(shards.read(2).mask.empty());
}

TEST(TarWriter, CutsShardsAtTheByteLimitAndTheirSizesAreWhatItCounted) {
  TempDir dir;
  // Members: 512-byte headers, data padded to 512; a 1000-byte image and a 2-byte .cls take
  // 512 + 1024 + 512 + 512 = 2560 bytes; the end of the archive 1024.
  constexpr std::uint64_t limit = 1024 + 3 * 2560;  // three samples a shard, exactly
  TarWriter writer(TarShardPattern((dir / "s-%04d.tar").string()), {.shard_bytes = limit});
  std::vector<std::uint64_t> seen;
  for (int i = 0; i < 7; ++i) {
    writer.add(tar_key(static_cast<std::size_t>(i), 8), tar_members(jpeg_sample(i, i % 2, 1000)));
    seen.push_back(writer.bytes());
  }
  // One sample alone larger than the limit: a shard of its own.
  writer.add(tar_key(7, 8), tar_members(jpeg_sample(7, 1, 20000)));
  const std::vector<TarShardSummary> shards = writer.finish();

  ASSERT_EQ(shards.size(), 4u);
  EXPECT_EQ(seen[0], 2560u);
  EXPECT_EQ(seen[2], 3 * 2560u);
  EXPECT_EQ(seen[3], limit + 2560u) << "the first shard's size, then the new one's members";
  const std::vector<std::size_t> expected_samples{3, 3, 1, 1};
  for (std::size_t s = 0; s < shards.size(); ++s) {
    EXPECT_EQ(shards[s].samples, expected_samples[s]) << s;
    EXPECT_EQ(shards[s].bytes, fs::file_size(shards[s].path)) << s;
    if (s < 2) {
      EXPECT_EQ(shards[s].bytes, limit) << s;
    }
  }
  EXPECT_EQ(shards[2].path, dir / "s-0002.tar");
  EXPECT_GT(shards[3].bytes, limit);
  const TarShards back(dir.path(), no_fallback());
  ASSERT_EQ(back.size(), 8u);
  EXPECT_EQ(back.shards()[3].samples, 1u);
  EXPECT_EQ(test::to_vector(back.read(7).bytes), test::distinct_bytes(7, 20000));
}

TEST(TarWriter, SameSamplesGiveTheSameBytes) {
  TempDir dir;
  for (const char* name : {"a.tar", "b.tar"}) {
    TarWriter writer(TarShardPattern((dir / name).string()), {.write_index = false});
    for (int i = 0; i < 3; ++i) writer.add(tar_key(static_cast<std::size_t>(i), 3), tar_members(jpeg_sample(i, i)));
    EXPECT_TRUE(writer.finish().front().index.empty());
  }
  EXPECT_EQ(read_file((dir / "a.tar").string()), read_file((dir / "b.tar").string()));
  EXPECT_FALSE(fs::exists(tar_index_path(dir / "a.tar")));
}

TEST(TarWriter, WithoutFinishLeavesNoShardNoIndexAndNoTemporaryFile) {
  TempDir dir;
  fs::create_directories(dir / "out");
  test::write_text(dir / "out/keep.txt", "not ours");
  {
    TarWriter writer(TarShardPattern((dir / "out/p-%02d.tar").string()), {.shard_samples = 1});
    for (int i = 0; i < 3; ++i) writer.add(tar_key(static_cast<std::size_t>(i), 3), tar_members(jpeg_sample(i, 0)));
    EXPECT_EQ(writer.finished().size(), 2u);
    EXPECT_TRUE(fs::exists(dir / "out/p-00.tar"));  // finished shards appear whole at once
    EXPECT_TRUE(fs::exists(dir / "out/p-00.tar.stoke-idx"));
  }
  EXPECT_EQ(files_in(dir / "out"), std::vector<std::string>{"keep.txt"});
}

TEST(TarWriter, RefusesBadKeysAndFieldsAndLimitsWithoutANumberedPattern) {
  TempDir dir;
  TarWriter writer(TarShardPattern((dir / "k.tar").string()));
  const std::vector<TarMember> members = tar_members(jpeg_sample(1, 0));
  for (const char* key : {"", "a.b", "dir/.hidden", "dir/"}) {
    EXPECT_THAT(test::error_message([&] { writer.add(key, members); }), HasSubstr("bad sample key")) << key;
  }
  const std::vector<TarMember> bad_field{{"", Bytes(test::distinct_bytes(1))}};
  EXPECT_THAT(test::error_message([&] { writer.add("k", bad_field); }), HasSubstr("bad field"));
  writer.add("train.v1/000000", members);  // a '.' before the last '/' is fine
  EXPECT_THAT(test::error_message([&] { TarWriter(TarShardPattern((dir / "one.tar").string()), {.shard_bytes = 1}); }),
              HasSubstr("put a number in the name"));
  EXPECT_THAT(test::error_message([&] {
                TarWriter missing(TarShardPattern((dir / "no/such/dir-%02d.tar").string()));
                missing.add("k", members);
              }),
              HasSubstr("no/such/dir-00.tar"));
}

}  // namespace
}  // namespace stoke::nodes
