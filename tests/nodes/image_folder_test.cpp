// ImageFolder: torchvision's layout, deterministic order, ignored files with reasons, errors that
// name the path, DICOM files by extension or (when asked) by their preamble, and a run through a
// stoke::graph pipeline.
#include "stoke/nodes/image_folder.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dataset_test_support.hpp"
#include "stoke/graph/pipeline.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;

/// root/{cat,dog}/... with a few non-images beside the images.
void make_folder(const TempDir& dir) {
  test::write_bytes(dir / "dog/b.jpg", test::distinct_bytes(1));
  test::write_bytes(dir / "dog/a.JPG", test::distinct_bytes(2));
  test::write_bytes(dir / "cat/z.png", test::distinct_bytes(3));
  test::write_bytes(dir / "cat/sub/a.jpeg", test::distinct_bytes(4));
  test::write_bytes(dir / "cat/y.PNG", test::distinct_bytes(5));
  test::write_bytes(dir / "cat/w.WebP", test::distinct_bytes(6));
  test::write_text(dir / "cat/notes.txt", "not an image");
  test::write_text(dir / "cat/README", "no extension");
  test::write_text(dir / "cat/.DS_Store", "hidden");
  test::write_text(dir / "labels.csv", "outside any class folder");
}

std::vector<std::string> relative_names(const ImageFolder& folder) {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < folder.size(); ++i)
    names.push_back(fs::path(folder.name(i)).lexically_relative(folder.root()).string());
  return names;
}

TEST(ImageFolder, ClassesAreSortedFolderNamesAndItemsGoByClassThenFolderThenName) {
  TempDir dir;
  make_folder(dir);
  const ImageFolder folder(dir.path());

  EXPECT_EQ(folder.classes(), (std::vector<std::string>{"cat", "dog"}));
  // torchvision's sorted(os.walk): the files of cat/ before those of cat/sub/.
  EXPECT_EQ(relative_names(folder), (std::vector<std::string>{"cat/w.WebP", "cat/y.PNG", "cat/z.png", "cat/sub/a.jpeg",
                                                              "dog/a.JPG", "dog/b.jpg"}));
  std::vector<int> labels;
  for (std::size_t i = 0; i < folder.size(); ++i) labels.push_back(folder.label(i));
  EXPECT_EQ(labels, (std::vector<int>{0, 0, 0, 0, 1, 1}));
}

TEST(ImageFolder, NestedFolderOrderMatchesTorchvision) {
  TempDir dir;
  for (const char* file : {"cat/z.jpg", "cat/a/1.jpg", "cat/a-b/2.jpg", "cat/a/b/3.jpg"}) {
    test::write_bytes(dir / file, test::distinct_bytes(1));
  }
  // torchvision.datasets.ImageFolder(dir).samples lists them in this order (checked with
  // torchvision 0.14: os.walk's folders sorted as strings, where '-' < '/').
  EXPECT_EQ(relative_names(ImageFolder(dir.path())),
            (std::vector<std::string>{"cat/z.jpg", "cat/a/1.jpg", "cat/a-b/2.jpg", "cat/a/b/3.jpg"}));
}

TEST(ImageFolder, NonImagesAreReportedWithAReasonAndNotCounted) {
  TempDir dir;
  make_folder(dir);
  const ImageFolder folder(dir.path());

  std::map<std::string, std::string> reasons;
  for (const IgnoredFile& file : folder.ignored())
    reasons[fs::path(file.path).lexically_relative(dir.path()).string()] = file.reason;
  ASSERT_EQ(reasons.size(), 4u);
  EXPECT_THAT(reasons["cat/notes.txt"], HasSubstr("not an image (.txt)"));
  EXPECT_THAT(reasons["cat/README"], HasSubstr("no extension"));
  EXPECT_THAT(reasons["cat/.DS_Store"], HasSubstr("hidden"));
  EXPECT_THAT(reasons["labels.csv"], HasSubstr("not in a class folder"));
  EXPECT_EQ(folder.size(), 6u);
}

TEST(ImageFolder, ExtensionsCanBeChosen) {
  TempDir dir;
  make_folder(dir);
  const ImageFolder folder(dir.path(), {.extensions = {".PNG", "txt"}, .allow_empty_classes = true});
  EXPECT_EQ(relative_names(folder), (std::vector<std::string>{"cat/notes.txt", "cat/y.PNG", "cat/z.png"}));
}

/// The start of a DICOM Part 10 file: a 128-byte zero preamble, "DICM", then a few bytes (not a
/// whole file: these tests list, they do not decode).
std::vector<std::byte> dicom_start(std::uint32_t seed) {
  std::vector<std::byte> bytes(128);
  for (const char c : std::string_view("DICM")) bytes.push_back(static_cast<std::byte>(c));
  const std::vector<std::byte> rest = test::distinct_bytes(seed, 8);
  bytes.insert(bytes.end(), rest.begin(), rest.end());
  return bytes;
}

std::map<std::string, std::string> ignored_reasons(const ImageFolder& folder, const fs::path& root) {
  std::map<std::string, std::string> reasons;
  for (const IgnoredFile& file : folder.ignored())
    reasons[fs::path(file.path).lexically_relative(root).string()] = file.reason;
  return reasons;
}

TEST(ImageFolder, DcmAndDicomFilesAreImagesByDefault) {
  const std::vector<std::string>& defaults = default_image_extensions();
  EXPECT_NE(std::find(defaults.begin(), defaults.end(), "dcm"), defaults.end());
  EXPECT_NE(std::find(defaults.begin(), defaults.end(), "dicom"), defaults.end());

  TempDir dir;
  test::write_bytes(dir / "ct/b.dcm", dicom_start(1));
  test::write_bytes(dir / "ct/a.DICOM", dicom_start(2));
  test::write_bytes(dir / "mr/series1/c.DCM", dicom_start(3));
  const ImageFolder folder(dir.path());
  EXPECT_EQ(folder.classes(), (std::vector<std::string>{"ct", "mr"}));
  EXPECT_EQ(relative_names(folder), (std::vector<std::string>{"ct/a.DICOM", "ct/b.dcm", "mr/series1/c.DCM"}));
  EXPECT_TRUE(folder.ignored().empty());
  EXPECT_EQ(test::to_vector(folder.read(1).bytes), dicom_start(1));
}

TEST(ImageFolder, ExtensionlessDicomIsTakenOnlyWhenProbedAndOtherFilesAreIgnoredWithAReason) {
  TempDir dir;
  test::write_bytes(dir / "ct/a.dcm", dicom_start(1));
  test::write_bytes(dir / "ct/IM0001", dicom_start(2));
  test::write_bytes(dir / "ct/1.2.840.113619.2.55", dicom_start(3));  // a UID as the name
  test::write_text(dir / "ct/README", std::string(200, 'x'));
  test::write_text(dir / "ct/short", "DICM");
  test::write_text(dir / "ct/notes.txt", std::string(128, '\0') + "DICM");  // an extension: not probed

  const ImageFolder plain(dir.path());
  EXPECT_EQ(relative_names(plain), (std::vector<std::string>{"ct/a.dcm"}));
  auto reasons = ignored_reasons(plain, dir.path());
  EXPECT_THAT(reasons["ct/IM0001"], HasSubstr("not an image (no extension)"));
  EXPECT_THAT(reasons["ct/1.2.840.113619.2.55"], HasSubstr("not an image (.55)"));

  const ImageFolder probed(dir.path(), {.probe_extensionless_dicom = true});
  EXPECT_EQ(relative_names(probed), (std::vector<std::string>{"ct/1.2.840.113619.2.55", "ct/IM0001", "ct/a.dcm"}));
  reasons = ignored_reasons(probed, dir.path());
  ASSERT_EQ(reasons.size(), 3u);
  EXPECT_EQ(reasons["ct/README"], "not an image (no extension) and not DICOM: no \"DICM\" at byte 128");
  EXPECT_THAT(reasons["ct/short"], HasSubstr("not DICOM: 4 bytes, shorter than"));
  EXPECT_EQ(reasons["ct/notes.txt"], "not an image (.txt)");
  EXPECT_EQ(test::to_vector(probed.read(1).bytes), dicom_start(2));
}

TEST(ImageFolder, ReadReturnsTheFileBytesLabelIndexAndName) {
  TempDir dir;
  make_folder(dir);
  const ImageFolder folder(dir.path());

  const Sample sample = folder.read(4);  // dog/a.JPG
  EXPECT_EQ(test::to_vector(sample.bytes), test::distinct_bytes(2));
  EXPECT_EQ(sample.encoding, Encoding::encoded);
  EXPECT_EQ(sample.label, 1);
  EXPECT_EQ(sample.index, 4u);
  EXPECT_EQ(sample.name, (dir / "dog/a.JPG").string());
  EXPECT_THROW(folder.read(6), std::out_of_range);
  EXPECT_THROW(folder.label(6), std::out_of_range);
}

TEST(ImageFolder, ReadOfAFileRemovedSinceListingNamesTheFile) {
  TempDir dir;
  make_folder(dir);
  const ImageFolder folder(dir.path());
  fs::remove(dir / "dog/b.jpg");
  EXPECT_THAT(test::error_message([&] { folder.read(5); }), HasSubstr((dir / "dog/b.jpg").string()));
}

TEST(ImageFolder, MissingRootIsAnErrorNamingThePathAndTheLayout) {
  TempDir dir;
  const std::string message = test::error_message([&] { ImageFolder folder(dir / "nope"); });
  EXPECT_THAT(message, HasSubstr((dir / "nope").string()));
  EXPECT_THAT(message, HasSubstr("does not exist"));
  EXPECT_THAT(message, HasSubstr("one subfolder per class"));
}

TEST(ImageFolder, RootThatIsAFileIsAnError) {
  TempDir dir;
  test::write_text(dir / "list.csv", "a.jpg,0\n");
  const std::string message = test::error_message([&] { ImageFolder folder(dir / "list.csv"); });
  EXPECT_THAT(message, HasSubstr("list.csv' is not a folder"));
  EXPECT_THAT(message, HasSubstr("FileList"));
}

TEST(ImageFolder, RootWithoutClassFoldersIsAnErrorThatCountsLooseImages) {
  TempDir dir;
  test::write_bytes(dir / "1.jpg", test::distinct_bytes(1));
  test::write_bytes(dir / "2.png", test::distinct_bytes(2));
  const std::string message = test::error_message([&] { ImageFolder folder(dir.path()); });
  EXPECT_THAT(message, HasSubstr("has no class folders"));
  EXPECT_THAT(message, HasSubstr("2 images lie directly in the root"));
}

TEST(ImageFolder, EmptyClassFolderIsAnErrorUnlessAllowed) {
  TempDir dir;
  test::write_bytes(dir / "a/1.jpg", test::distinct_bytes(1));
  test::write_text(dir / "b/readme.txt", "no images here");
  test::write_bytes(dir / "c/2.jpg", test::distinct_bytes(2));
  EXPECT_THAT(test::error_message([&] { ImageFolder folder(dir.path()); }),
              HasSubstr("class folder '" + (dir / "b").string() + "' has no images"));

  const ImageFolder folder(dir.path(), {.allow_empty_classes = true});
  EXPECT_EQ(folder.classes(), (std::vector<std::string>{"a", "b", "c"}));
  ASSERT_EQ(folder.size(), 2u);
  EXPECT_EQ(folder.label(1), 2);  // c keeps its index
}

TEST(ImageFolder, LabelsFollowClassesWithEmptyOnesFirstBetweenAndLast) {
  // Labels are not stored per item but found from where each class's items end.
  TempDir dir;
  for (const char* empty : {"a", "c", "d", "f"}) test::write_text(dir / empty / "readme.txt", "no images");
  for (int i = 0; i < 3; ++i) test::write_bytes(dir / "b" / (std::to_string(i) + ".jpg"), test::distinct_bytes(1));
  for (int i = 0; i < 2; ++i) test::write_bytes(dir / "e" / (std::to_string(i) + ".png"), test::distinct_bytes(2));
  const ImageFolder folder(dir.path(), {.allow_empty_classes = true});
  EXPECT_EQ(folder.classes(), (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
  ASSERT_EQ(folder.size(), 5u);
  std::vector<int> labels;
  for (std::size_t i = 0; i < folder.size(); ++i) labels.push_back(folder.label(i));
  EXPECT_EQ(labels, (std::vector<int>{1, 1, 1, 4, 4}));
  EXPECT_EQ(relative_names(folder), (std::vector<std::string>{"b/0.jpg", "b/1.jpg", "b/2.jpg", "e/0.png", "e/1.png"}));
  EXPECT_EQ(folder.path(3), dir / "e" / "0.png");
  EXPECT_EQ(folder.read(4).label, 4);
  EXPECT_THROW((void)folder.name(5), std::out_of_range);
  EXPECT_THROW((void)folder.path(5), std::out_of_range);
}

TEST(ImageFolder, SymbolicLinksAreFollowedButALoopIsNot) {
  TempDir dir;
  test::write_bytes(dir / "elsewhere/x.jpg", test::distinct_bytes(1));
  test::write_bytes(dir / "root/a/1.jpg", test::distinct_bytes(2));
  fs::create_directory_symlink(dir / "elsewhere", dir / "root/a/linked");
  fs::create_directory_symlink(dir / "root/a", dir / "root/a/loop");
  fs::create_symlink(dir / "missing.jpg", dir / "root/a/broken.jpg");

  const ImageFolder folder(dir / "root");
  EXPECT_EQ(relative_names(folder), (std::vector<std::string>{"a/1.jpg", "a/linked/x.jpg"}));
  std::map<std::string, std::string> reasons;
  for (const IgnoredFile& file : folder.ignored())
    reasons[fs::path(file.path).lexically_relative(dir / "root").string()] = file.reason;
  EXPECT_THAT(reasons["a/loop"], HasSubstr("symbolic link to a folder that contains it"));
  EXPECT_THAT(reasons["a/broken.jpg"], HasSubstr("broken symbolic link"));
}

TEST(ImageFolder, PipelineOfDatasetSourceAndReadSampleSeesEveryItemOnce) {
  TempDir dir;
  constexpr int per_class = 40;
  for (int c = 0; c < 3; ++c) {
    for (int i = 0; i < per_class; ++i) {
      test::write_bytes(dir / ("class" + std::to_string(c)) / ("img" + std::to_string(i) + ".jpg"),
                        test::distinct_bytes(static_cast<std::uint32_t>(c * 1000 + i)));
    }
  }
  const auto folder = std::make_shared<const ImageFolder>(dir.path());
  ASSERT_EQ(folder->size(), 3u * per_class);

  constexpr std::uint32_t epochs = 2;
  std::map<std::pair<std::uint32_t, std::uint64_t>, int> seen;
  bool bytes_match = true;
  graph::Pipeline pipe({.max_in_flight = 16, .threads = 4});
  pipe.source("items", DatasetSource(folder->size(), {.shuffle = true, .seed = 7}, epochs))
      .map("read", ReadSample(folder), {.concurrency = graph::parallel(4)})
      .sink("collect", [&](Sample sample) {
        ++seen[{sample.epoch, sample.index}];
        const auto expected = read_file(folder->path(sample.index).string());
        bytes_match =
            bytes_match && expected == test::to_vector(sample.bytes) && sample.label == folder->label(sample.index);
      });
  pipe.run();

  EXPECT_TRUE(bytes_match);
  ASSERT_EQ(seen.size(), epochs * folder->size());
  for (const auto& [key, count] : seen) EXPECT_EQ(count, 1) << "epoch " << key.first << " item " << key.second;
}

}  // namespace
}  // namespace stoke::nodes
