// A full disk (RLIMIT_FSIZE) while pack_dataset writes a .stoke pack, as `stoke pack` does: the call
// throws naming the output, a previous pack at that path is there byte for byte and still reads,
// and where there was none, nothing is left under the output's names (no partial pack, no
// temporary file). Once while the index is written at finish() and once from inside the
// pipeline's write stage (a pack larger than the writer's buffer).
//
// Each pack is written in a fork()ed child: pack_dataset runs a TBB pipeline, and the parent never
// starts one, so every child forks from a process without TBB workers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "dataset_test_support.hpp"
#include "stoke/nodes/image_folder.hpp"
#include "stoke/nodes/pack_dataset.hpp"
#include "stoke/nodes/packed.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

std::vector<char> file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> folder_entries(const fs::path& folder) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// ---- a child process

using stoke::test::ChildResult;
using stoke::test::describe;
using stoke::test::run_in_child;
using enum stoke::test::ChildExit;

// pack_dataset of the image folder `images` into `out` in a child, with files limited to
// `limit` bytes (none when 0).
ChildResult pack_in_child(const fs::path& images, const fs::path& out, rlim_t limit = 0) {
  return run_in_child([&] {
    if (limit != 0) {
      std::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing
      const rlimit cap{.rlim_cur = limit, .rlim_max = limit};
      if (::setrlimit(RLIMIT_FSIZE, &cap) != 0) throw std::logic_error("setrlimit failed");
    }
    const ImageFolder folder(images);
    const PackReport report = pack_dataset(folder, out, {.threads = 2, .root = folder.root()});
    if (!report.written) throw std::logic_error("pack_dataset wrote nothing");
  });
}

// `count` files of `size` bytes each in two classes (not decoded: packing without resize stores
// the bytes as read).
void write_images(const fs::path& folder, int count, std::size_t size, std::uint32_t seed) {
  for (int i = 0; i < count; ++i) {
    const fs::path file = folder / (i % 2 ? "cat" : "dog") / (std::to_string(i) + ".jpg");
    test::write_bytes(file, test::distinct_bytes(seed + static_cast<std::uint32_t>(i), size));
  }
}

// A full disk while finishing a pack over an earlier one (the items fit the writer's buffer, so
// the writes fail at finish()): the earlier pack is untouched, both files, and still reads.
TEST(PackFault, FullDiskKeepsThePreviousPackAndNamesTheOutput) {
  TempDir dir;
  write_images(dir / "old", 4, 2000, 1);
  write_images(dir / "new", 6, 3000, 100);
  const fs::path out = dir / "out/x.stoke";
  fs::create_directories(out.parent_path());

  const ChildResult first = pack_in_child(dir / "old", out);
  ASSERT_EQ(first.exit_code, returned) << describe(first);
  const std::vector<char> data_before = file_bytes(out);
  const std::vector<char> index_before = file_bytes(pack_index_path(out));
  ASSERT_FALSE(data_before.empty());
  ASSERT_FALSE(index_before.empty());

  for (const rlim_t limit : {rlim_t{1}, rlim_t{4096}, rlim_t{6 * 3000}}) {
    const std::string context = "file size limit " + std::to_string(limit);
    const ChildResult full = pack_in_child(dir / "new", out, limit);
    ASSERT_FALSE(full.hung) << context << ": " << describe(full);
    RecordProperty("message", full.message);  // in --gtest_output=xml
    EXPECT_EQ(full.exit_code, threw) << context << ": pack_dataset should have thrown; " << describe(full);
    EXPECT_THAT(full.message, HasSubstr(out.string())) << context << ": the message does not name the output";
    EXPECT_THAT(full.message, HasSubstr("File too large")) << context << ": the message does not say why";

    EXPECT_TRUE(file_bytes(out) == data_before) << context << ": the previous pack's data changed";
    EXPECT_TRUE(file_bytes(pack_index_path(out)) == index_before) << context << ": the previous pack's index changed";
    EXPECT_EQ(folder_entries(out.parent_path()), (std::vector<std::string>{"x.stoke", "x.stoke.idx"})) << context;
    const PackedDataset pack(out);
    ASSERT_EQ(pack.size(), 4u) << context;
    for (std::size_t i = 0; i < pack.size(); ++i) {
      const std::vector<std::byte> bytes = test::to_vector(pack.read(i).bytes);
      const std::vector<char> file = file_bytes(dir / "old" / pack.name(i));
      EXPECT_TRUE(bytes.size() == file.size() && std::equal(file.begin(), file.end(), bytes.begin(),
                                                            [](char c, std::byte b) { return std::byte(c) == b; }))
          << context << ": item " << i << " (" << pack.name(i) << ") differs from its file";
    }
  }
}

// A full disk in the middle of a pack larger than the writer's 1 MiB buffer, so that the write
// fails inside the pipeline's write stage, with no earlier pack: the error names the output and
// nothing is left under its names.
TEST(PackFault, FullDiskMidPackLeavesNoPartialPack) {
  TempDir dir;
  write_images(dir / "images", 12, 256 * 1024, 7);  // 3 MiB
  const fs::path out = dir / "out/big.stoke";
  fs::create_directories(out.parent_path());

  for (const rlim_t limit : {rlim_t{1} << 20, rlim_t{2} << 20}) {
    const std::string context = "file size limit " + std::to_string(limit);
    const ChildResult full = pack_in_child(dir / "images", out, limit);
    ASSERT_FALSE(full.hung) << context << ": " << describe(full);
    RecordProperty("message", full.message);  // in --gtest_output=xml
    EXPECT_EQ(full.exit_code, threw) << context << ": pack_dataset should have thrown; " << describe(full);
    EXPECT_THAT(full.message, HasSubstr(out.string())) << context << ": the message does not name the output";
    EXPECT_THAT(full.message, HasSubstr("File too large")) << context << ": the message does not say why";
    EXPECT_EQ(folder_entries(out.parent_path()), std::vector<std::string>{}) << context << ": a partial pack is left";
  }

  // The same pack without the limit is written whole.
  const ChildResult whole = pack_in_child(dir / "images", out);
  ASSERT_EQ(whole.exit_code, returned) << describe(whole);
  EXPECT_EQ(PackedDataset(out).size(), 12u);
}

}  // namespace
}  // namespace stoke::nodes
