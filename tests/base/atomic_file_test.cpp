// base::write_file_atomically: the whole file or none, no temporary left behind, errors that name
// the file and what it is.
#include "stoke/base/atomic_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>

namespace stoke::base::test {
namespace {

namespace fs = std::filesystem;

class AtomicFile : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::temp_directory_path() / ("stoke-atomic-file-" + std::to_string(::getpid()));
    fs::remove_all(folder_);
    fs::create_directories(folder_);
  }
  void TearDown() override { fs::remove_all(folder_); }

  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::size_t entries() const { return static_cast<std::size_t>(std::distance(fs::directory_iterator(folder_), {})); }

  fs::path folder_;
};

TEST_F(AtomicFile, WritesAndReplacesLeavingNoTemporary) {
  const fs::path file = folder_ / "report.json";
  write_file_atomically(file, std::string_view("first version"), "report");
  EXPECT_EQ(read(file), "first version");
  write_file_atomically(file, std::string_view("second"), "report");
  EXPECT_EQ(read(file), "second");
  EXPECT_EQ(entries(), 1u);
}

TEST_F(AtomicFile, AMissingFolderNamesTheFileAndTheFix) {
  const fs::path file = folder_ / "missing" / "report.json";
  try {
    write_file_atomically(file, std::string_view("text"), "loader report");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cannot write the loader report " + file.string()), std::string::npos) << message;
    EXPECT_NE(message.find("check that its folder exists"), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(folder_ / "missing"));
}

TEST_F(AtomicFile, AFailedRenameRemovesTheTemporaryAndKeepsWhatWasThere) {
  const fs::path taken = folder_ / "taken";  // a folder where the file should go: rename(2) refuses
  fs::create_directories(taken / "inside");
  EXPECT_THROW(write_file_atomically(taken, std::string_view("text"), "index"), std::runtime_error);
  EXPECT_TRUE(fs::is_directory(taken / "inside"));
  EXPECT_EQ(entries(), 1u);  // the folder alone: no temporary left
}

}  // namespace
}  // namespace stoke::base::test
