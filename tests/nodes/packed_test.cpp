// Packed shards: PackWriter -> PackedDataset round trips, zero-copy reads, validation of damaged
// packs, and interrupted packs that leave nothing behind.
#include "stoke/nodes/packed.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"
#include "stoke/nodes/image_folder.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

/// Writes a pack of `count` items (item i: distinct_bytes(i, 100 + i), label i % 3, name "item<i>").
PackSummary write_pack(const fs::path& path, std::size_t count, std::uint32_t resize = 0) {
  PackWriter writer(path, {"a", "b", "c"}, resize);
  for (std::size_t i = 0; i < count; ++i) {
    writer.add(test::distinct_bytes(static_cast<std::uint32_t>(i), 100 + i), static_cast<int>(i % 3),
               "item" + std::to_string(i));
  }
  return writer.finish();
}

/// Overwrites bytes of a file at `offset`.
void patch(const fs::path& path, std::size_t offset, std::vector<std::uint8_t> bytes) {
  std::fstream file(path, std::ios::binary | std::ios::in | std::ios::out);
  file.seekp(static_cast<std::streamoff>(offset));
  file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(file.good());
}

std::vector<std::uint8_t> le64(std::uint64_t value) {
  std::vector<std::uint8_t> bytes(8);
  for (int b = 0; b < 8; ++b) bytes[static_cast<std::size_t>(b)] = static_cast<std::uint8_t>(value >> (8 * b));
  return bytes;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Packed, WriterAndDatasetRoundTripBytesLabelsNamesAndHeader) {
  TempDir dir;
  const PackSummary summary = write_pack(dir / "x.stoke", 50, 160);
  EXPECT_EQ(summary.items, 50u);
  EXPECT_EQ(summary.data, dir / "x.stoke");
  EXPECT_EQ(summary.index, dir / "x.stoke.idx");
  EXPECT_EQ(summary.data_bytes, fs::file_size(dir / "x.stoke"));
  EXPECT_EQ(summary.index_bytes, fs::file_size(dir / "x.stoke.idx"));
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{"x.stoke", "x.stoke.idx"}));

  for (PackAccess access : {PackAccess::random, PackAccess::sequential}) {
    const PackedDataset pack(dir / "x.stoke", {.access = access});
    ASSERT_EQ(pack.size(), 50u);
    EXPECT_EQ(pack.classes(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(pack.resize(), 160u);
    EXPECT_EQ(pack.data_size(), summary.data_bytes);
    for (std::size_t i = 0; i < pack.size(); ++i) {
      const Sample sample = pack.read(i);
      EXPECT_EQ(test::to_vector(sample.bytes), test::distinct_bytes(static_cast<std::uint32_t>(i), 100 + i));
      EXPECT_EQ(sample.label, static_cast<int>(i % 3));
      EXPECT_EQ(pack.label(i), static_cast<int>(i % 3));
      EXPECT_EQ(sample.name, "item" + std::to_string(i));
      EXPECT_EQ(pack.name(i), "item" + std::to_string(i));
      EXPECT_EQ(sample.index, i);
      EXPECT_EQ(sample.encoding, Encoding::encoded);
    }
    EXPECT_THROW(pack.read(50), std::out_of_range);
  }
  // The index path opens the same pack.
  EXPECT_EQ(PackedDataset(dir / "x.stoke.idx").size(), 50u);
}

TEST(Packed, ReadItemsOutliveTheDataset) {
  TempDir dir;
  write_pack(dir / "x.stoke", 5);
  Sample kept;
  {
    const PackedDataset pack(dir / "x.stoke");
    kept = pack.read(3);
  }
  EXPECT_EQ(test::to_vector(kept.bytes), test::distinct_bytes(3, 103));
}

// A data file truncated in place while the pack is open (`cp` over it): the items it lost throw,
// naming the item and the file's new size; those before the cut still read. With views of the
// mapping, the first read of a lost page would have killed the process with SIGBUS.
TEST(Packed, ADataFileTruncatedWhileOpenFailsTheLostItemsNotTheProcess) {
  TempDir dir;
  write_pack(dir / "x.stoke", 8);
  const PackedDataset pack(dir / "x.stoke");
  const auto half = std::filesystem::file_size(dir / "x.stoke") / 2;
  std::filesystem::resize_file(dir / "x.stoke", half);
  EXPECT_EQ(test::to_vector(pack.read(0).bytes), test::distinct_bytes(0, 100));
  try {
    pack.read(7);
    FAIL() << "read a lost item";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("x.stoke item 7: its 107 bytes at byte"));
    EXPECT_THAT(e.what(),
                HasSubstr("which is now " + std::to_string(half) + " bytes (truncated since it was opened?)"));
  }
}

TEST(Packed, EmptyItemsNamesAndPacksAreAllowed) {
  TempDir dir;
  {
    PackWriter writer(dir / "e.stoke");
    writer.add({}, -1, "");
    writer.add(test::distinct_bytes(1), 7, "seven");  // no classes: any label >= -1
    writer.finish();
  }
  const PackedDataset pack(dir / "e.stoke");
  ASSERT_EQ(pack.size(), 2u);
  EXPECT_TRUE(pack.read(0).bytes.empty());
  EXPECT_EQ(pack.label(0), -1);
  EXPECT_EQ(pack.name(0), (dir / "e.stoke").string() + "#0");
  EXPECT_EQ(pack.label(1), 7);
  EXPECT_TRUE(pack.classes().empty());

  write_pack(dir / "none.stoke", 0);
  EXPECT_EQ(PackedDataset(dir / "none.stoke").size(), 0u);
}

TEST(Packed, WriterRejectsLabelsOutsideItsClasses) {
  TempDir dir;
  PackWriter writer(dir / "x.stoke", {"a", "b"});
  EXPECT_THROW(writer.add(test::distinct_bytes(1), 2, "x"), std::invalid_argument);
  EXPECT_THROW(writer.add(test::distinct_bytes(1), -2, "x"), std::invalid_argument);
  writer.add(test::distinct_bytes(1), -1, "unlabelled");
  writer.add(test::distinct_bytes(2), 1, "b");
  EXPECT_EQ(writer.finish().items, 2u);
  EXPECT_THROW(writer.finish(), std::logic_error);
}

TEST(Packed, PackingAnImageFolderKeepsBytesLabelsAndNames) {
  TempDir dir;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 4; ++i) {
      test::write_bytes(dir / "images" / ("class" + std::to_string(c)) / (std::to_string(i) + ".jpg"),
                        test::small_jpeg(c * 10 + i));
    }
  }
  const ImageFolder folder(dir / "images");
  {
    PackWriter writer(dir / "images.stoke", folder.classes());
    for (std::size_t i = 0; i < folder.size(); ++i) {
      const Sample sample = folder.read(i);
      writer.add(sample.bytes.span(), sample.label, fs::relative(folder.path(i), folder.root()).generic_string());
    }
    writer.finish();
  }
  const PackedDataset pack(dir / "images.stoke");
  ASSERT_EQ(pack.size(), folder.size());
  EXPECT_EQ(pack.classes(), folder.classes());
  for (std::size_t i = 0; i < pack.size(); ++i) {
    EXPECT_EQ(test::to_vector(pack.read(i).bytes), test::to_vector(folder.read(i).bytes));
    EXPECT_EQ(pack.label(i), folder.label(i));
    EXPECT_EQ(dir / "images" / pack.name(i), folder.path(i));
  }
}

// ---- damaged packs -----------------------------------------------------------------------------

class DamagedPack : public ::testing::Test {
 protected:
  void SetUp() override { write_pack(data(), 20); }
  fs::path data() const { return dir_ / "x.stoke"; }
  fs::path index() const { return dir_ / "x.stoke.idx"; }
  std::string open_error() const {
    return test::error_message([&] { PackedDataset pack(data()); });
  }

  TempDir dir_;
};

TEST_F(DamagedPack, TruncatedDataFileNamesTheFirstItemPastTheEnd) {
  // Items lie back to back after the 32-byte header: item i holds 100 + i bytes (write_pack).
  std::uintmax_t item17_end = 32;
  for (std::uintmax_t i = 0; i <= 17; ++i) item17_end += 100 + i;
  fs::resize_file(data(), item17_end - 1);
  EXPECT_THAT(open_error(), HasSubstr(index().string() + ": item 17 points past the end of " + data().string() +
                                      " (truncated copy?)"));
}

TEST_F(DamagedPack, ItemOffsetPastTheEndIsReported) {
  patch(index(), 64 + 32 * 5, le64(fs::file_size(data())));  // item 5's offset
  EXPECT_THAT(open_error(), HasSubstr("x.stoke.idx: item 5 points past the end of"));
}

TEST_F(DamagedPack, HugeItemSizeDoesNotWrapAround) {
  patch(index(), 64 + 32 * 2 + 8, le64(~std::uint64_t{0} - 10));  // item 2's size
  EXPECT_THAT(open_error(), HasSubstr("x.stoke.idx: item 2 points past the end of"));
}

TEST_F(DamagedPack, BadMagicIsNotAPackIndex) {
  patch(index(), 0, {'N', 'O', 'P', 'E'});
  EXPECT_THAT(open_error(), HasSubstr("x.stoke.idx: not a stoke pack index"));
}

TEST_F(DamagedPack, OtherFormatVersionSaysToRepack) {
  patch(index(), 8, {2, 0, 0, 0});
  EXPECT_THAT(open_error(), HasSubstr("x.stoke.idx: pack format version 2, this stoke reads version 1"));
}

TEST_F(DamagedPack, TruncatedIndexIsReported) {
  fs::resize_file(index(), fs::file_size(index()) - 10);
  EXPECT_THAT(open_error(), HasSubstr("(truncated copy?)"));
  fs::resize_file(index(), 20);
  EXPECT_THAT(open_error(), HasSubstr("x.stoke.idx: 20 bytes, too short for a stoke pack index"));
}

TEST_F(DamagedPack, ChangedLabelFailsTheChecksum) {
  patch(index(), 64 + 32 * 3 + 28, {2, 0, 0, 0});  // item 3's label 0 -> 2, still a valid class
  EXPECT_THAT(open_error(), HasSubstr("x.stoke.idx: checksum mismatch"));
}

TEST_F(DamagedPack, LabelOutsideTheClassesIsReported) {
  patch(index(), 64 + 32 * 3 + 28, {9, 0, 0, 0});
  EXPECT_THAT(open_error(), HasSubstr("item 3 has label 9 but the pack has 3 classes"));
}

TEST_F(DamagedPack, IndexOfAnotherPackIsRefused) {
  write_pack(dir_ / "other.stoke", 20);
  fs::copy_file(dir_ / "other.stoke.idx", index(), fs::copy_options::overwrite_existing);
  EXPECT_THAT(open_error(), HasSubstr("belongs to another pack than"));
}

TEST_F(DamagedPack, DataFileLongerThanTheIndexSaysIsReported) {
  std::ofstream(data(), std::ios::binary | std::ios::app) << "junk";
  EXPECT_THAT(open_error(), HasSubstr("(mixed-up files?)"));
}

TEST_F(DamagedPack, MissingIndexNamesIt) {
  fs::remove(index());
  EXPECT_THAT(open_error(), HasSubstr(index().string() + ": cannot open"));
}

// ---- interrupted packs -------------------------------------------------------------------------

TEST(Packed, WriterDestroyedBeforeFinishLeavesNoFiles) {
  TempDir dir;
  {
    PackWriter writer(dir / "x.stoke", {"a"});
    writer.add(test::distinct_bytes(1, 5000), 0, "one");
    EXPECT_FALSE(files_in(dir.path()).empty());  // the temporary data file exists meanwhile
    EXPECT_FALSE(fs::exists(dir / "x.stoke"));
  }
  EXPECT_TRUE(files_in(dir.path()).empty());
}

TEST(Packed, InterruptedRepackLeavesThePreviousPackIntact) {
  TempDir dir;
  write_pack(dir / "x.stoke", 4);
  try {
    PackWriter writer(dir / "x.stoke", {"a", "b", "c"});
    writer.add(test::distinct_bytes(99), 0, "new");
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{"x.stoke", "x.stoke.idx"}));
  const PackedDataset pack(dir / "x.stoke");
  EXPECT_EQ(pack.size(), 4u);
  EXPECT_EQ(pack.name(0), "item0");
}

TEST(Packed, FinishedRepackReplacesThePreviousPack) {
  TempDir dir;
  write_pack(dir / "x.stoke", 4);
  write_pack(dir / "x.stoke", 9);
  EXPECT_EQ(PackedDataset(dir / "x.stoke").size(), 9u);
  EXPECT_EQ(files_in(dir.path()), (std::vector<std::string>{"x.stoke", "x.stoke.idx"}));
}

TEST(Packed, UnwritableDestinationIsAnErrorNamingIt) {
  TempDir dir;
  EXPECT_THAT(test::error_message([&] { PackWriter writer(dir / "no/such/folder/x.stoke"); }),
              HasSubstr("no/such/folder/x.stoke"));
}

}  // namespace
}  // namespace stoke::nodes
