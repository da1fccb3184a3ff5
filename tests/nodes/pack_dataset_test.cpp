// pack_dataset: a folder packed and read back through PackedDataset equals the folder (names,
// labels, bytes); a file that cannot be decoded is skipped and named with its reason; --resize's
// re-encoding is counted; on_error = fail writes nothing.
#include "stoke/nodes/pack_dataset.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"
#include "stoke/graph/errors.hpp"
#include "stoke/nodes/image_folder.hpp"

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

}  // namespace
}  // namespace stoke::nodes
