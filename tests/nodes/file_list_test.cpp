// FileList: `path,label` lines, with comments, a header, CRLF, commas in paths, and errors that
// name the line.
#include "stoke/nodes/file_list.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

std::vector<std::string> names(const FileList& list) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < list.size(); ++i) out.push_back(list.name(i));
  return out;
}

std::vector<int> labels(const FileList& list) {
  std::vector<int> out;
  for (std::size_t i = 0; i < list.size(); ++i) out.push_back(list.label(i));
  return out;
}

TEST(FileList, ParsesLinesSkippingHeaderCommentsAndBlankLinesWithCrlf) {
  TempDir dir;
  test::write_text(dir / "list.csv",
                   "path,label\r\n"
                   "# a comment\r\n"
                   "\r\n"
                   "cats/1.jpg,0\r\n"
                   "  dogs/2.jpg , 2 \r\n"
                   "   # an indented comment\n"
                   "dogs/with,comma.jpg,1\n"
                   "\"quoted \"\"x\"\", and comma.jpg\",1\n"
                   "/abs/3.png,0");  // no final newline
  const FileList list(dir / "list.csv", dir / "images");

  EXPECT_EQ(names(list),
            (std::vector<std::string>{(dir / "images/cats/1.jpg").string(), (dir / "images/dogs/2.jpg").string(),
                                      (dir / "images/dogs/with,comma.jpg").string(),
                                      (dir / "images/quoted \"x\", and comma.jpg").string(), "/abs/3.png"}));
  EXPECT_EQ(labels(list), (std::vector<int>{0, 2, 1, 1, 0}));
  EXPECT_EQ(list.classes(), (std::vector<std::string>{"0", "1", "2"}));
}

TEST(FileList, WithoutAHeaderTheFirstLineIsAnItem) {
  TempDir dir;
  test::write_text(dir / "list.txt", "a.jpg,3\nb.jpg,4\n");
  const FileList list(dir / "list.txt");
  EXPECT_EQ(labels(list), (std::vector<int>{3, 4}));
  // Without a root, paths are relative to the list file's folder.
  EXPECT_EQ(list.name(0), (dir / "a.jpg").string());
}

TEST(FileList, AnEmptyListHasNoItemsAndNoClasses) {
  TempDir dir;
  test::write_text(dir / "list.csv", "# nothing yet\n\npath,label\n");
  const FileList list(dir / "list.csv");
  EXPECT_EQ(list.size(), 0u);
  EXPECT_TRUE(list.classes().empty());
}

TEST(FileList, ReadReturnsTheFileBytesAndLabel) {
  TempDir dir;
  test::write_bytes(dir / "img/x.jpg", test::distinct_bytes(9));
  test::write_text(dir / "list.csv", "x.jpg,5\nmissing.jpg,1\n");
  const FileList list(dir / "list.csv", dir / "img");

  const Sample sample = list.read(0);
  EXPECT_EQ(test::to_vector(sample.bytes), test::distinct_bytes(9));
  EXPECT_EQ(sample.label, 5);
  EXPECT_EQ(sample.index, 0u);
  EXPECT_EQ(sample.name, (dir / "img/x.jpg").string());
  EXPECT_THAT(test::error_message([&] { list.read(1); }), HasSubstr((dir / "img/missing.jpg").string()));
  EXPECT_THROW(list.read(2), std::out_of_range);
}

struct BadLine {
  const char* text;
  const char* message;  // expected part of the error
};

class FileListBadLine : public ::testing::TestWithParam<BadLine> {};

TEST_P(FileListBadLine, IsAnErrorNamingFileLineAndProblem) {
  TempDir dir;
  // A good header and two good lines first, so the bad line is line 4 (comments count too).
  test::write_text(dir / "list.csv", std::string("path,label\na.jpg,0\n# comment\n") + GetParam().text + "\n");
  const std::string message = test::error_message([&] { FileList list(dir / "list.csv"); });
  EXPECT_THAT(message, HasSubstr((dir / "list.csv").string() + ":4: " + GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(Lines, FileListBadLine,
                         ::testing::Values(BadLine{"b.jpg,x", "label 'x' is not an integer"},
                                           BadLine{"b.jpg,", "label '' is not an integer"},
                                           BadLine{"b.jpg,1.5", "label '1.5' is not an integer"},
                                           BadLine{"b.jpg,-2", "label '-2' is negative"},
                                           BadLine{"b.jpg,99999999999", "label '99999999999' is too large"},
                                           BadLine{"b.jpg", "no ','"}, BadLine{" ,3", "empty path"},
                                           BadLine{"\"b.jpg,3", "unterminated quoted path"}));

TEST(FileList, OnlyTheFirstLineMayBeAHeader) {
  TempDir dir;
  test::write_text(dir / "list.csv", "a.jpg,0\npath,label\n");
  EXPECT_THAT(test::error_message([&] { FileList list(dir / "list.csv"); }),
              HasSubstr("list.csv:2: label 'label' is not an integer"));
}

TEST(FileList, MissingListFileIsAnErrorNamingIt) {
  TempDir dir;
  const std::string message = test::error_message([&] { FileList list(dir / "nope.csv"); });
  EXPECT_THAT(message, HasSubstr((dir / "nope.csv").string()));
  EXPECT_THAT(message, HasSubstr("path,label"));
}

}  // namespace
}  // namespace stoke::nodes
