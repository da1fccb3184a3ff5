// `stoke pack`, run as a program: packs generated folders and lists, as .stoke packs and as tar
// shards, and the packs read back equal to the originals; bad option values are usage errors.
// STOKE_CLI is the path of the built `stoke` executable.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "dataset_test_support.hpp"
#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/file_list.hpp"
#include "stoke/nodes/image_folder.hpp"
#include "stoke/nodes/packed.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

using Result = stoke::test::CliResult;
using stoke::test::slurp;

/// Runs `stoke pack <args>`.
Result run_pack(const TempDir& scratch, std::vector<std::string> args) {
  args.insert(args.begin(), "pack");
  return stoke::test::run_stoke(scratch.path(), args);
}

/// root/{circle,square,triangle}/<i>.jpg, 48 x 32 JPEGs, plus a stray text file.
void make_folder(const fs::path& root) {
  const char* classes[] = {"circle", "square", "triangle"};
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < 5; ++i) {
      test::write_bytes(root / classes[c] / (std::to_string(i) + ".jpg"), test::small_jpeg(c * 10 + i, 48, 32));
    }
  }
  test::write_text(root / "square/notes.txt", "not an image");
}

TEST(PackCommand, PacksAnImageFolderThatReadsBackEqualAndReportsIgnoredFiles) {
  TempDir dir;
  make_folder(dir / "images");
  std::ofstream(dir / "file") << "a file, not a folder";
  const Result result = run_pack(dir, {"--data", (dir / "images").string(), "--out", (dir / "file/x.stoke").string()});
  ASSERT_EQ(result.exit_code, 1) << "a folder that cannot be made: " << result.out << result.err;
  EXPECT_THAT(result.err, HasSubstr("cannot make the folder " + (dir / "file").string() + " for --out"));

  // out/ does not exist yet: the pack makes it.
  const Result ok = run_pack(dir, {"--data", (dir / "images").string(), "--out", (dir / "out/x.stoke").string()});
  ASSERT_EQ(ok.exit_code, 0) << ok.out << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("wrote " + (dir / "out/x.stoke").string() + " (15 items"));
  EXPECT_THAT(ok.out, HasSubstr("notes.txt: not an image (.txt)"));
  EXPECT_THAT(ok.err, HasSubstr("15/15 items"));

  const ImageFolder folder(dir / "images");
  const PackedDataset pack(dir / "out/x.stoke");
  ASSERT_EQ(pack.size(), folder.size());
  EXPECT_EQ(pack.classes(), folder.classes());
  EXPECT_EQ(pack.resize(), 0u);
  for (std::size_t i = 0; i < pack.size(); ++i) {
    EXPECT_EQ(test::to_vector(pack.read(i).bytes), test::to_vector(folder.read(i).bytes)) << i;
    EXPECT_EQ(pack.label(i), folder.label(i));
    EXPECT_EQ(pack.name(i), fs::path(folder.name(i)).lexically_relative(dir / "images").generic_string());
  }
}

TEST(PackCommand, OutputDoesNotDependOnTheThreadCount) {
  TempDir dir;
  make_folder(dir / "images");
  for (const char* threads : {"1", "4"}) {
    const Result result =
        run_pack(dir, {"--data", (dir / "images").string(), "--out",
                       (dir / (std::string("t") + threads + ".stoke")).string(), "--threads", threads});
    ASSERT_EQ(result.exit_code, 0) << result.err;
  }
  // The data files differ only in their random pack id (bytes 16..24 of the header).
  std::string one = slurp(dir / "t1.stoke"), four = slurp(dir / "t4.stoke");
  ASSERT_EQ(one.size(), four.size());
  EXPECT_EQ(one.substr(32), four.substr(32));
  const PackedDataset a(dir / "t1.stoke"), b(dir / "t4.stoke");
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a.name(i), b.name(i));
}

TEST(PackCommand, ResizeShrinksTheShorterSideKeepsSmallJpegsAndSkipsUndecodableFiles) {
  TempDir dir;
  test::write_bytes(dir / "images/a/big.jpg", test::small_jpeg(1, 64, 40));
  test::write_bytes(dir / "images/a/small.jpg", test::small_jpeg(2, 20, 12));
  test::write_bytes(dir / "images/b/tall.jpg", test::small_jpeg(3, 30, 90));
  test::write_text(dir / "images/b/broken.jpg", "this is not a JPEG");

  const Result result = run_pack(dir, {"--data", (dir / "images").string(), "--out", (dir / "r.stoke").string(),
                                       "--resize", "16", "--quality", "80", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("broken.jpg: not an image"));
  EXPECT_THAT(result.out, HasSubstr("\"items\":3,"));
  EXPECT_THAT(result.out, HasSubstr("\"resized\":2,"));

  const PackedDataset pack(dir / "r.stoke");
  EXPECT_EQ(pack.resize(), 16u);
  ASSERT_EQ(pack.size(), 3u);
  const Decoder decoder;
  const auto size_of = [&](std::size_t i) {
    const ImageInfo info = decoder.probe(pack.read(i));
    return std::pair(info.width, info.height);
  };
  EXPECT_EQ(pack.name(0), "a/big.jpg");
  EXPECT_EQ(size_of(0), std::pair(25, 16));  // 64 x 40 -> int(16 * 64 / 40) x 16
  EXPECT_EQ(pack.name(1), "a/small.jpg");
  EXPECT_EQ(test::to_vector(pack.read(1).bytes), test::small_jpeg(2, 20, 12));  // small enough: kept as is
  EXPECT_EQ(pack.name(2), "b/tall.jpg");
  EXPECT_EQ(size_of(2), std::pair(16, 48));
}

TEST(PackCommand, OnErrorFailWritesNothing) {
  TempDir dir;
  test::write_bytes(dir / "images/a/good.jpg", test::small_jpeg(1));
  test::write_text(dir / "images/a/broken.jpg", "this is not a JPEG");
  const Result result = run_pack(dir, {"--data", (dir / "images").string(), "--out", (dir / "f.stoke").string(),
                                       "--resize", "8", "--on-error", "fail"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.err, HasSubstr("broken.jpg"));
  EXPECT_FALSE(fs::exists(dir / "f.stoke"));
  EXPECT_FALSE(fs::exists(dir / "f.stoke.idx"));
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr("f.stoke"))) << "left behind";
  }
}

TEST(PackCommand, PacksAFileList) {
  TempDir dir;
  test::write_bytes(dir / "files/x.jpg", test::distinct_bytes(1));
  test::write_bytes(dir / "files/y.jpg", test::distinct_bytes(2));
  test::write_text(dir / "list.csv", "path,label\ny.jpg,2\nx.jpg,0\n");
  const Result result = run_pack(dir, {"--list", (dir / "list.csv").string(), "--data", (dir / "files").string(),
                                       "--out", (dir / "l.stoke").string()});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const PackedDataset pack(dir / "l.stoke");
  ASSERT_EQ(pack.size(), 2u);
  EXPECT_EQ(pack.name(0), "y.jpg");
  EXPECT_EQ(pack.label(0), 2);
  EXPECT_EQ(test::to_vector(pack.read(0).bytes), test::distinct_bytes(2));
  EXPECT_EQ(pack.classes(), (std::vector<std::string>{"0", "1", "2"}));
}

TEST(PackCommand, UsageErrorsExitWithTwo) {
  TempDir dir;
  EXPECT_EQ(run_pack(dir, {"--data", dir.path().string()}).exit_code, 2);  // no --out
  EXPECT_EQ(run_pack(dir, {"--out", (dir / "x.stoke").string()}).exit_code, 2);
  const Result quality = run_pack(dir, {"--data", ".", "--out", "x.stoke", "--quality", "50"});
  EXPECT_EQ(quality.exit_code, 2);
  EXPECT_THAT(quality.err, HasSubstr("--quality needs --resize"));
  const Result help = run_pack(dir, {"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--resize"));
}

TEST(PackCommand, FormatTarWritesShardsCutBySizeThatReadBackEqualWithTheirIndexes) {
  TempDir dir;
  make_folder(dir / "images");  // shards/ does not exist: the pack makes it
  const Result result =
      run_pack(dir, {"--data", (dir / "images").string(), "--out", (dir / "shards/train-%06d.tar").string(), "--format",
                     "tar", "--shard-bytes", "6K", "--json"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_THAT(result.out, HasSubstr("tar shards (15 items"));
  EXPECT_THAT(result.out, HasSubstr((dir / "shards/train-000000.tar").string() + " .. "));
  EXPECT_THAT(result.out, HasSubstr("each with its index"));
  EXPECT_THAT(result.out, HasSubstr("classes: 3 (labels are class numbers; names are not stored: 0 circle, 1 square"));
  EXPECT_THAT(result.out, HasSubstr("notes.txt: not an image (.txt)"));
  EXPECT_THAT(result.out, HasSubstr("\"format\":\"tar\""));
  EXPECT_THAT(result.out, HasSubstr("\"items\":15,"));
  EXPECT_THAT(result.err, HasSubstr("15/15 items"));

  const ImageFolder folder(dir / "images");
  const TarShards shards(dir / "shards");
  ASSERT_GT(shards.shards().size(), 2u);
  for (const TarShardInfo& info : shards.shards()) {
    EXPECT_LE(info.bytes, 6u * 1024) << info.path;
    EXPECT_EQ(info.source, TarIndexSource::loaded) << info.path << ": indexed by the pack";
  }
  ASSERT_EQ(shards.size(), folder.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    EXPECT_EQ(test::to_vector(shards.read(i).bytes), test::to_vector(folder.read(i).bytes)) << i;
    EXPECT_EQ(shards.label(i), folder.label(i)) << i;
  }

  // Packed again with fewer shards: the earlier pack's last shards are named.
  const Result again = run_pack(dir, {"--data", (dir / "images").string(), "--out",
                                      (dir / "shards/train-%06d.tar").string(), "--format", "tar", "--no-index"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("wrote 1 tar shard (15 items"));
  EXPECT_THAT(again.out, ::testing::Not(HasSubstr("each with its index")));
  EXPECT_THAT(again.out, HasSubstr("warning: " + (dir / "shards/train-000001.tar").string() + " and "));
}

TEST(PackCommand, FormatTarKeepsMasksAndTargetsOfAList) {
  TempDir dir;
  test::write_bytes(dir / "files/a.png", test::distinct_bytes(1));
  test::write_bytes(dir / "files/a-mask.png", test::distinct_bytes(2, 20));
  test::write_bytes(dir / "files/b.jpg", test::small_jpeg(3));
  test::write_text(dir / "list.csv", "path,label,mask,age\na.png,1,a-mask.png,63\nb.jpg,0,,0.5\n");
  const Result result = run_pack(dir, {"--list", (dir / "list.csv").string(), "--data", (dir / "files").string(),
                                       "--out", (dir / "seg.tar").string(), "--format", "tar"});
  ASSERT_EQ(result.exit_code, 0) << result.out << result.err;
  const FileList list(dir / "list.csv", dir / "files");
  const TarShards shards(dir / "seg.tar");
  ASSERT_EQ(shards.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(test::to_vector(shards.read(i).bytes), test::to_vector(list.read(i).bytes)) << i;
    EXPECT_EQ(test::to_vector(shards.read(i).mask), test::to_vector(list.read(i).mask)) << i;
    EXPECT_EQ(shards.read(i).targets, list.read(i).targets) << i;
    EXPECT_EQ(shards.label(i), list.label(i)) << i;
  }
}

TEST(PackCommand, BadTarOptionValuesExitWithTwoAndSayWhy) {
  TempDir dir;
  const std::string data = dir.path().string();
  const auto usage = [&](std::vector<std::string> args, const std::string& message) {
    args.insert(args.begin(), {"--data", data});
    for (std::size_t a = 0; a + 1 < args.size(); ++a) {
      if (args[a] == "--out") args[a + 1] = (dir / args[a + 1]).string();
    }
    const Result result = run_pack(dir, args);
    EXPECT_EQ(result.exit_code, 2) << testing::PrintToString(args) << result.err;
    EXPECT_THAT(result.err, HasSubstr(message)) << testing::PrintToString(args);
  };
  usage({"--out", "x.stoke", "--format", "zip"}, "--format must be stoke or tar (got 'zip')");
  usage({"--out", "x-%06d.tar", "--format", "tar", "--shard-bytes", "1X"}, "--shard-bytes must be a size such as 500M");
  usage({"--out", "x-%06d.tar", "--format", "tar", "--shard-bytes", "-5"}, "--shard-bytes must be a size");
  usage({"--out", "x-%06d.tar", "--format", "tar", "--shard-items", "-1"}, "--shard-items must be 0");
  usage({"--out", "x.stoke", "--shard-bytes", "1G"}, "--shard-bytes needs --format tar");
  usage({"--out", "x.stoke", "--no-index"}, "--no-index needs --format tar");
  usage({"--out", "x.tar"}, "names a tar file, but the format is stoke: add --format tar");
  usage({"--out", "x-%d.tar", "--format", "tar"}, "must be zero-padded (e.g. %06d)");
  usage({"--out", "x-%06d", "--format", "tar"}, "must end in .tar");
  usage({"--out", "x.tar", "--format", "tar", "--shard-bytes", "1G"}, "need a numbered --out");
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    const std::string name = entry.path().filename().string();
    if (name != "stdout.txt" && name != "stderr.txt") ADD_FAILURE() << "left behind: " << entry.path();
  }

  const Result help = run_pack(dir, {"--help"});
  EXPECT_THAT(help.out, HasSubstr("--shard-bytes"));
  EXPECT_THAT(help.out, HasSubstr("--format tar --shard-bytes 1G"));
}

}  // namespace
}  // namespace stoke::nodes
