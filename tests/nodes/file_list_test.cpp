// FileList: `path,label` lines, with comments, a header, CRLF, commas in paths, and errors that
// name the line; and the column format (path, label, mask, targets) a header switches on.
#include "stoke/nodes/file_list.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>
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

TEST(FileListColumns, HeaderWithMaskScalarAndVectorTargetsIsReadBackExactly) {
  TempDir dir;
  test::write_bytes(dir / "img/a.png", test::distinct_bytes(1));
  test::write_bytes(dir / "img/b,c.png", test::distinct_bytes(2));
  test::write_bytes(dir / "img/masks/a.png", test::distinct_bytes(11));
  test::write_bytes(dir / "img/masks/b.png", test::distinct_bytes(12));
  test::write_text(dir / "list.csv",
                   "# scans with masks\r\n"
                   "path,label,mask,age,labels\r\n"
                   "a.png,2,masks/a.png,63,0 1 1 0\r\n"
                   "\"b,c.png\" , , masks/b.png , -41.5 ,\"1e-3  +2 0.1 -0\"\r\n");
  const FileList list(dir / "list.csv", dir / "img");

  ASSERT_EQ(list.size(), 2u);
  EXPECT_TRUE(list.has_masks());
  ASSERT_EQ(list.target_columns().size(), 2u);
  EXPECT_EQ(list.target_columns()[0].name, "age");
  EXPECT_EQ(list.target_columns()[0].shape, (std::vector<std::int64_t>{}));
  EXPECT_EQ(list.target_columns()[1].name, "labels");
  EXPECT_EQ(list.target_columns()[1].shape, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(labels(list), (std::vector<int>{2, -1}));  // an empty label is unlabelled
  EXPECT_EQ(list.classes(), (std::vector<std::string>{"0", "1", "2"}));

  const Sample a = list.read(0);
  EXPECT_EQ(test::to_vector(a.bytes), test::distinct_bytes(1));
  EXPECT_EQ(a.label, 2);
  EXPECT_EQ(a.name, (dir / "img/a.png").string());
  EXPECT_EQ(test::to_vector(a.mask), test::distinct_bytes(11));
  EXPECT_EQ(a.mask_name, (dir / "img/masks/a.png").string());
  EXPECT_EQ(a.targets, (std::map<std::string, Target>{{"age", Target{{}, {63.0F}}},
                                                      {"labels", Target{{4}, {0.0F, 1.0F, 1.0F, 0.0F}}}}));

  const Sample b = list.read(1);
  EXPECT_EQ(test::to_vector(b.bytes), test::distinct_bytes(2));
  EXPECT_EQ(b.label, -1);
  EXPECT_EQ(b.index, 1u);
  EXPECT_EQ(b.name, (dir / "img/b,c.png").string());
  EXPECT_EQ(test::to_vector(b.mask), test::distinct_bytes(12));
  EXPECT_EQ(b.mask_name, (dir / "img/masks/b.png").string());
  EXPECT_EQ(b.targets, (std::map<std::string, Target>{{"age", Target{{}, {-41.5F}}},
                                                      {"labels", Target{{4}, {1e-3F, 2.0F, 0.1F, -0.0F}}}}));
}

TEST(FileListColumns, ColumnsComeInAnyOrderAndLabelMaskAndTargetsAreOptional) {
  TempDir dir;
  test::write_bytes(dir / "a.jpg", test::distinct_bytes(1));
  test::write_text(dir / "targets.csv", "score,path\n0.5,a.jpg\n");
  const FileList targets_only(dir / "targets.csv");
  EXPECT_EQ(labels(targets_only), (std::vector<int>{-1}));
  EXPECT_TRUE(targets_only.classes().empty());
  EXPECT_FALSE(targets_only.has_masks());
  EXPECT_TRUE(targets_only.mask_path(0).empty());
  const Sample sample = targets_only.read(0);
  EXPECT_TRUE(sample.mask.empty());
  EXPECT_TRUE(sample.mask_name.empty());
  EXPECT_EQ(sample.targets, (std::map<std::string, Target>{{"score", Target{{}, {0.5F}}}}));

  // A lone path column: a list of unlabelled files.
  test::write_text(dir / "paths.csv", "path\na.jpg\n\"/abs/b,c.jpg\"\n");
  const FileList paths(dir / "paths.csv");
  EXPECT_EQ(names(paths), (std::vector<std::string>{(dir / "a.jpg").string(), "/abs/b,c.jpg"}));
  EXPECT_EQ(labels(paths), (std::vector<int>{-1, -1}));
  EXPECT_TRUE(paths.target_columns().empty());
  EXPECT_TRUE(paths.read(0).targets.empty());
}

TEST(FileListColumns, AnEmptyMaskFieldMeansNoMask) {
  TempDir dir;
  test::write_bytes(dir / "a.jpg", test::distinct_bytes(1));
  test::write_bytes(dir / "b.jpg", test::distinct_bytes(2));
  test::write_bytes(dir / "b_mask.png", test::distinct_bytes(3));
  test::write_text(dir / "list.csv", "mask,path\n,a.jpg\nb_mask.png,b.jpg\n");
  const FileList list(dir / "list.csv");
  ASSERT_TRUE(list.has_masks());
  EXPECT_TRUE(list.mask_path(0).empty());
  EXPECT_TRUE(list.read(0).mask.empty());
  EXPECT_EQ(list.mask_path(1), dir / "b_mask.png");
  EXPECT_EQ(test::to_vector(list.read(1).mask), test::distinct_bytes(3));
}

TEST(FileListColumns, PathsAndMasksOfManyItemsComeBackEachItsOwn) {
  // Paths and masks share one arena: every item's path and mask (or none) must come back intact,
  // for paths of every length, absolute or relative, with masks present and absent in any mix.
  TempDir dir;
  std::string text = "path,mask,label\n";
  std::vector<std::string> paths, masks;
  for (int i = 0; i < 300; ++i) {
    const std::string path = (i % 7 == 0 ? "/abs/" : "") + std::string(static_cast<std::size_t>(i % 23) + 1, 'p') +
                             std::to_string(i) + ".jpg";
    const std::string mask =
        i % 3 == 0 ? "" : "m/" + std::string(static_cast<std::size_t>(i % 11), 'm') + std::to_string(i);
    text += path + "," + mask + "," + (i % 5 == 0 ? "" : std::to_string(i)) + "\n";
    paths.push_back(path.front() == '/' ? path : (dir / path).string());
    masks.push_back(mask.empty() ? "" : (dir / mask).string());
  }
  test::write_text(dir / "list.csv", text);
  const FileList list(dir / "list.csv");
  ASSERT_EQ(list.size(), 300u);
  for (std::size_t i = 0; i < list.size(); ++i) {
    EXPECT_EQ(list.name(i), paths[i]) << i;
    EXPECT_EQ(list.path(i).string(), paths[i]) << i;
    EXPECT_EQ(list.mask_path(i).string(), masks[i]) << i;
    EXPECT_EQ(list.label(i), i % 5 == 0 ? -1 : static_cast<int>(i)) << i;
  }
  EXPECT_EQ(list.classes().size(), 300u);  // "0" ... "299"
  for (const auto& call :
       std::vector<std::function<void()>>{[&] { (void)list.name(300); }, [&] { (void)list.path(300); },
                                          [&] { (void)list.mask_path(300); }, [&] { (void)list.label(300); }}) {
    EXPECT_THROW(call(), std::out_of_range);
  }
  EXPECT_THAT(test::error_message([&] { (void)list.name(300); }),
              HasSubstr("item 300 is out of range (the dataset has 300 items)"));
}

TEST(FileList, LegacyItemsOfEveryPathLengthComeBackIntact) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 200; ++i)
    text +=
        std::string(static_cast<std::size_t>(i % 37) + 1, 'a') + std::to_string(i) + "," + std::to_string(i % 4) + "\n";
  test::write_text(dir / "list.csv", text);
  const FileList list(dir / "list.csv", "/root");
  ASSERT_EQ(list.size(), 200u);
  EXPECT_FALSE(list.has_masks());
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string expected = "/root/" + std::string(i % 37 + 1, 'a') + std::to_string(i);
    EXPECT_EQ(list.name(i), expected) << i;
    EXPECT_EQ(list.path(i), fs::path(expected)) << i;
    EXPECT_TRUE(list.mask_path(i).empty()) << i;
    EXPECT_EQ(list.label(i), static_cast<int>(i % 4)) << i;
  }
}

TEST(FileListColumns, AMissingMaskFileIsAnErrorAtReadNamingIt) {
  TempDir dir;
  test::write_bytes(dir / "a.jpg", test::distinct_bytes(1));
  test::write_text(dir / "list.csv", "path,mask\na.jpg,masks/gone.png\n");
  const FileList list(dir / "list.csv");  // masks are not opened while listing
  try {
    list.read(0);
    FAIL() << "read() of an item whose mask is missing did not throw";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), HasSubstr((dir / "masks/gone.png").string()));
    EXPECT_THAT(error.what(), HasSubstr("mask"));
  }
}

TEST(FileListColumns, TwoFieldLegacyHeadersKeepThePathLabelFormat) {
  TempDir dir;
  // `path,label` and any other two-field header without path or mask: split at the last comma,
  // an empty label is an error, no masks or targets.
  for (const char* header : {"path,label", " path , label ", "filename,class", "Path,Label"}) {
    test::write_text(dir / "list.csv", std::string(header) + "\ndogs/with,comma.jpg,1\n");
    const FileList list(dir / "list.csv");
    EXPECT_EQ(names(list), (std::vector<std::string>{(dir / "dogs/with,comma.jpg").string()})) << header;
    EXPECT_EQ(labels(list), (std::vector<int>{1})) << header;
    EXPECT_FALSE(list.has_masks()) << header;
    EXPECT_TRUE(list.target_columns().empty()) << header;
  }
  test::write_bytes(dir / "x.jpg", test::distinct_bytes(1));
  test::write_text(dir / "list.csv", "path,label\nx.jpg,0\n");
  const Sample sample = FileList(dir / "list.csv").read(0);
  EXPECT_TRUE(sample.mask.empty());
  EXPECT_TRUE(sample.targets.empty());
  test::write_text(dir / "list.csv", "path,label\nx.jpg,\n");
  EXPECT_THAT(test::error_message([&] { FileList list(dir / "list.csv"); }),
              HasSubstr("list.csv:2: label '' is not an integer"));
}

struct BadColumnList {
  const char* text;
  const char* message;  // expected after "list.csv:"
};

class FileListBadColumns : public ::testing::TestWithParam<BadColumnList> {};

TEST_P(FileListBadColumns, IsAnErrorNamingFileLineAndProblem) {
  TempDir dir;
  test::write_text(dir / "list.csv", GetParam().text);
  const std::string message = test::error_message([&] { FileList list(dir / "list.csv"); });
  EXPECT_THAT(message, HasSubstr((dir / "list.csv").string() + ":" + GetParam().message));
}

// Header errors are on line 2 (after a comment); row errors on line 4 (after a good row and a
// comment).
INSTANTIATE_TEST_SUITE_P(
    Lists, FileListBadColumns,
    ::testing::Values(
        BadColumnList{"# h\npath,age,age\n", "2: duplicate column 'age' (columns 2 and 3)"},
        BadColumnList{"# h\npath,Label,age\n", "2: unknown column 'Label'"},
        BadColumnList{"# h\npath,,age\n", "2: column 2 of the header has no name"},
        BadColumnList{"# h\nimage,mask\n", "2: the header names no 'path' column"},
        BadColumnList{"# h\nimage,label,age\n", "2: the header names no 'path' column"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\nb,c.jpg,1,2\n", "4: 4 fields, but the header names 3 columns"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\nb.jpg,1\n", "4: 2 fields, but the header names 3 columns"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\nb.jpg,1,1x\n", "4: column 'age': '1x' is not a number"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\nb.jpg,1,\n", "4: column 'age' is empty"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\nb.jpg,1,1e99\n", "4: column 'age': '1e99' is out of"},
        BadColumnList{"path,labels\na.jpg,0 1 1\n# c\nb.jpg,0 1\n", "4: column 'labels' has 2 values, but 3 on line 2"},
        BadColumnList{"path,age\na.jpg,1\n# c\nb.jpg,1 2\n", "4: column 'age' has 2 values, but 1 on line 2"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\nb.jpg,x,1\n", "4: label 'x' is not an integer"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\nb.jpg,-1,1\n", "4: label '-1' is negative"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\n ,0,1\n", "4: column 'path' is empty"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\n\"b.jpg,0,1\n", "4: unterminated quoted field 1"},
        BadColumnList{"path,label,age\na.jpg,0,1\n# c\n\"b\"x.jpg,0,1\n", "4: expected ',' after quoted field 1"}));

}  // namespace
}  // namespace stoke::nodes
