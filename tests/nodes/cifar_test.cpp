// CifarDataset: CIFAR-10/100 binary batches, planar -> interleaved RGB, labels, class names, and
// errors for truncated files and bad labels.
#include "stoke/nodes/cifar.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

constexpr std::size_t plane = 1024;

/// Pixel value of channel c at pixel p of record `tag`: known, and different per channel.
std::uint8_t pixel(std::uint32_t tag, int c, std::size_t p) {
  return static_cast<std::uint8_t>(tag * 7 + static_cast<std::uint32_t>(c) * 85 + p * 3);
}

/// `count` records tagged first_tag, first_tag + 1, ...; labels come from `label_of(tag)`
/// (one byte for CIFAR-10, two for CIFAR-100).
template <class LabelOf>
std::vector<std::byte> records(std::uint32_t first_tag, std::size_t count, LabelOf label_of) {
  std::vector<std::byte> bytes;
  for (std::uint32_t tag = first_tag; tag < first_tag + count; ++tag) {
    for (std::uint8_t label : label_of(tag)) bytes.push_back(static_cast<std::byte>(label));
    for (int c = 0; c < 3; ++c) {
      for (std::size_t p = 0; p < plane; ++p) bytes.push_back(static_cast<std::byte>(pixel(tag, c, p)));
    }
  }
  return bytes;
}

std::vector<std::byte> cifar10_records(std::uint32_t first_tag, std::size_t count) {
  return records(first_tag, count,
                 [](std::uint32_t tag) { return std::vector<std::uint8_t>{static_cast<std::uint8_t>(tag % 10)}; });
}

std::vector<std::byte> cifar100_records(std::uint32_t first_tag, std::size_t count) {
  return records(first_tag, count, [](std::uint32_t tag) {
    return std::vector<std::uint8_t>{static_cast<std::uint8_t>(tag % 20), static_cast<std::uint8_t>(tag % 100)};
  });
}

/// Checks that `sample` is record `tag` as interleaved RGB.
void expect_record(const Sample& sample, std::uint32_t tag) {
  ASSERT_EQ(sample.encoding, Encoding::raw_rgb);
  ASSERT_EQ(sample.width, 32);
  ASSERT_EQ(sample.height, 32);
  ASSERT_EQ(sample.bytes.size(), 3 * plane);
  for (std::size_t p = 0; p < plane; ++p) {
    for (int c = 0; c < 3; ++c) {
      ASSERT_EQ(std::to_integer<std::uint8_t>(sample.bytes.data()[3 * p + static_cast<std::size_t>(c)]),
                pixel(tag, c, p))
          << "record " << tag << " pixel " << p << " channel " << c;
    }
  }
}

TEST(Cifar, SeveralFilesFormOneDatasetAndReadInterleavesThePlanes) {
  TempDir dir;
  test::write_bytes(dir / "data_batch_1.bin", cifar10_records(0, 3));
  test::write_bytes(dir / "data_batch_2.bin", cifar10_records(3, 4));
  const CifarDataset cifar({dir / "data_batch_1.bin", dir / "data_batch_2.bin"});

  ASSERT_EQ(cifar.size(), 7u);
  EXPECT_EQ(cifar.kind(), CifarKind::cifar10);
  EXPECT_EQ(cifar.record_size(), 3073u);
  for (std::uint32_t i = 0; i < 7; ++i) {
    EXPECT_EQ(cifar.label(i), static_cast<int>(i % 10));
    const Sample sample = cifar.read(i);
    expect_record(sample, i);
    EXPECT_EQ(sample.label, static_cast<int>(i % 10));
    EXPECT_EQ(sample.index, i);
  }
  EXPECT_EQ(cifar.name(4), (dir / "data_batch_2.bin").string() + "#1");
  EXPECT_EQ(cifar.classes().size(), 10u);
  EXPECT_EQ(cifar.classes()[0], "airplane");
  EXPECT_EQ(cifar.classes()[9], "truck");
  EXPECT_THROW(cifar.read(7), std::out_of_range);
}

TEST(Cifar, TruncatedFileIsAnErrorCountingTheWholeRecords) {
  TempDir dir;
  auto bytes = cifar10_records(0, 4);
  bytes.resize(3 * 3073 + 1500);
  test::write_bytes(dir / "data_batch_1.bin", bytes);
  EXPECT_THAT(test::error_message([&] { CifarDataset cifar({dir / "data_batch_1.bin"}); }),
              HasSubstr("data_batch_1.bin: 3 whole records then 1500 stray bytes (a CIFAR-10 record is 3073 bytes): "
                        "the file is truncated or not CIFAR-10"));
}

TEST(Cifar, Cifar100FileReadAsCifar10IsReportedAsNotWholeRecords) {
  TempDir dir;
  test::write_bytes(dir / "train.bin", cifar100_records(0, 5));  // 5 * 3074 = 5 * 3073 + 5
  EXPECT_THAT(test::error_message([&] { CifarDataset cifar({dir / "train.bin"}); }),
              HasSubstr("train.bin: 5 whole records then 5 stray bytes"));
}

TEST(Cifar, EmptyOrMissingFileIsAnErrorNamingIt) {
  TempDir dir;
  test::write_bytes(dir / "empty.bin", {});
  EXPECT_THAT(test::error_message([&] { CifarDataset cifar({dir / "empty.bin"}); }),
              HasSubstr("empty.bin: the file is empty"));
  EXPECT_THAT(test::error_message([&] { CifarDataset cifar({dir / "missing.bin"}); }), HasSubstr("missing.bin"));
  EXPECT_THROW(CifarDataset({}), std::invalid_argument);
}

TEST(Cifar, LabelOutOfRangeIsAnErrorNamingFileAndRecord) {
  TempDir dir;
  auto bytes = cifar10_records(0, 3);
  bytes[2 * 3073] = std::byte{10};
  test::write_bytes(dir / "data_batch_3.bin", bytes);
  const std::string message = test::error_message([&] { CifarDataset cifar({dir / "data_batch_3.bin"}); });
  EXPECT_THAT(message, HasSubstr("data_batch_3.bin: record 2 has label 10"));

  auto bytes100 = cifar100_records(0, 3);
  bytes100[1 * 3074 + 1] = std::byte{100};  // fine label of record 1
  test::write_bytes(dir / "train.bin", bytes100);
  EXPECT_THAT(test::error_message([&] { CifarDataset cifar({dir / "train.bin"}, {.kind = CifarKind::cifar100}); }),
              HasSubstr("train.bin: record 1 has coarse label 1 and fine label 100"));
}

TEST(Cifar, Cifar100GivesFineOrCoarseLabelsAndNamesFromTheFolder) {
  TempDir dir;
  test::write_bytes(dir / "train.bin", cifar100_records(0, 30));
  std::string fine_names;
  for (int i = 0; i < 100; ++i) fine_names += "fine" + std::to_string(i) + "\r\n";
  test::write_text(dir / "fine_label_names.txt", fine_names + "\n\n");  // trailing blank lines

  const CifarDataset fine({dir / "train.bin"}, {.kind = CifarKind::cifar100});
  ASSERT_EQ(fine.size(), 30u);
  EXPECT_EQ(fine.record_size(), 3074u);
  EXPECT_EQ(fine.label(25), 25);
  expect_record(fine.read(25), 25);
  ASSERT_EQ(fine.classes().size(), 100u);
  EXPECT_EQ(fine.classes()[42], "fine42");

  // No coarse_label_names.txt: numbered names.
  const CifarDataset coarse({dir / "train.bin"}, {.kind = CifarKind::cifar100, .labels = CifarLabels::coarse});
  EXPECT_EQ(coarse.label(25), 5);
  EXPECT_EQ(coarse.read(25).label, 5);
  ASSERT_EQ(coarse.classes().size(), 20u);
  EXPECT_EQ(coarse.classes()[19], "19");

  test::write_text(dir / "fine_label_names.txt", "only\ntwo\n");
  EXPECT_THAT(test::error_message([&] { CifarDataset bad({dir / "train.bin"}, {.kind = CifarKind::cifar100}); }),
              HasSubstr("fine_label_names.txt: 2 class names, expected 100"));
  EXPECT_THROW(CifarDataset({dir / "train.bin"}, {.kind = CifarKind::cifar10, .labels = CifarLabels::coarse}),
               std::invalid_argument);
}

TEST(Cifar, OpenFindsTheCifar10BatchesInNumericOrder) {
  TempDir dir;
  const fs::path batches = dir / "cifar-10-batches-bin";
  // data_batch_10 must come after data_batch_2 (numeric, not text, order).
  test::write_bytes(batches / "data_batch_10.bin", cifar10_records(30, 1));
  test::write_bytes(batches / "data_batch_2.bin", cifar10_records(20, 2));
  test::write_bytes(batches / "data_batch_1.bin", cifar10_records(10, 3));
  test::write_bytes(batches / "test_batch.bin", cifar10_records(40, 2));
  test::write_text(batches / "batches.meta.txt", "airplane\n");

  for (const fs::path& where : {dir.path(), batches}) {  // the unpack folder or the batch folder
    const auto train = CifarDataset::open(where, CifarSplit::train);
    ASSERT_EQ(train->size(), 6u);
    EXPECT_EQ(train->kind(), CifarKind::cifar10);
    expect_record(train->read(0), 10);
    expect_record(train->read(3), 20);
    expect_record(train->read(5), 30);
    const auto test_split = CifarDataset::open(where, CifarSplit::test);
    ASSERT_EQ(test_split->size(), 2u);
    expect_record(test_split->read(1), 41);
  }
}

TEST(Cifar, OpenFindsCifar100AndReportsAFolderWithoutBatches) {
  TempDir dir;
  const fs::path batches = dir / "cifar-100-binary";
  test::write_bytes(batches / "train.bin", cifar100_records(0, 4));
  test::write_bytes(batches / "test.bin", cifar100_records(50, 2));

  const auto train = CifarDataset::open(dir.path(), CifarSplit::train, CifarLabels::coarse);
  EXPECT_EQ(train->kind(), CifarKind::cifar100);
  EXPECT_EQ(train->size(), 4u);
  EXPECT_EQ(train->label(3), 3);
  const auto test_split = CifarDataset::open(batches, CifarSplit::test);
  EXPECT_EQ(test_split->label(1), 51);

  TempDir empty;
  const std::string message = test::error_message([&] { CifarDataset::open(empty.path(), CifarSplit::train); });
  EXPECT_THAT(message, HasSubstr("no training batches in '" + empty.path().string()));
  EXPECT_THAT(message, HasSubstr("data_batch_1.bin"));
  EXPECT_THAT(test::error_message([&] { CifarDataset::open(dir / "nope", CifarSplit::test); }),
              HasSubstr("is not a folder"));
}

}  // namespace
}  // namespace stoke::nodes
