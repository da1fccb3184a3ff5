// SegmentationFolder: images and masks in two folders are paired by their path without the
// extension, in a fixed order; what does not pair is named (an error, or left out and listed);
// read() gives both files' bytes; and a Decoder turns a pair into an Image with its mask.
#include "stoke/nodes/segmentation_folder.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <opencv2/core.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"
#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/jpeg_encode.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::distinct_bytes;
using test::TempDir;
using test::write_bytes;
using ::testing::HasSubstr;

std::vector<std::byte> as_vector(const Bytes& bytes) { return {bytes.span().begin(), bytes.span().end()}; }

TEST(SegmentationFolder, PairsByPathWithoutTheExtensionInAFixedOrder) {
  TempDir root;
  write_bytes(root / "images/b.jpg", distinct_bytes(1));
  write_bytes(root / "images/a.jpg", distinct_bytes(2));
  write_bytes(root / "images/city/c.JPG", distinct_bytes(3));
  write_bytes(root / "images/notes.txt", distinct_bytes(9));
  write_bytes(root / "masks/a.png", distinct_bytes(12));
  write_bytes(root / "masks/b.png", distinct_bytes(11));
  write_bytes(root / "masks/city/c.png", distinct_bytes(13));
  write_bytes(root / "masks/.DS_Store", distinct_bytes(14));
  const SegmentationFolder folder(root.path());
  ASSERT_EQ(folder.size(), 3u);
  EXPECT_EQ(folder.image_path(0), root / "images/a.jpg");
  EXPECT_EQ(folder.mask_path(0), root / "masks/a.png");
  EXPECT_EQ(folder.image_path(1), root / "images/b.jpg");
  EXPECT_EQ(folder.image_path(2), root / "images/city/c.JPG");
  EXPECT_EQ(folder.mask_path(2), root / "masks/city/c.png");
  EXPECT_EQ(folder.label(1), -1);
  const Sample sample = folder.read(1);
  EXPECT_EQ(as_vector(sample.bytes), distinct_bytes(1));
  EXPECT_EQ(as_vector(sample.mask), distinct_bytes(11));
  EXPECT_EQ(sample.name, (root / "images/b.jpg").string());
  EXPECT_EQ(sample.mask_name, (root / "masks/b.png").string());
  EXPECT_EQ(sample.index, 1u);
  EXPECT_EQ(folder.ignored().size(), 2u);  // notes.txt, .DS_Store
}

TEST(SegmentationFolder, WhatDoesNotPairIsNamedOrLeftOutAndListed) {
  TempDir root;
  write_bytes(root / "images/a.jpg", distinct_bytes(1));
  write_bytes(root / "images/lonely.jpg", distinct_bytes(2));
  write_bytes(root / "masks/a.png", distinct_bytes(3));
  write_bytes(root / "masks/orphan.png", distinct_bytes(4));
  try {
    const SegmentationFolder folder(root.path());
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("1 images without a mask (" + (root / "images/lonely.jpg").string() + ")"));
    EXPECT_THAT(e.what(), HasSubstr("1 masks without an image (" + (root / "masks/orphan.png").string() + ")"));
    EXPECT_THAT(e.what(), HasSubstr("allow_unmatched"));
  }
  const SegmentationFolder folder(root.path(), {.allow_unmatched = true});
  ASSERT_EQ(folder.size(), 1u);
  std::vector<std::string> listed;
  for (const IgnoredFile& f : folder.ignored()) listed.push_back(f.path + ": " + f.reason);
  EXPECT_THAT(listed, ::testing::UnorderedElementsAre(HasSubstr("lonely.jpg: no mask"), HasSubstr("orphan.png: a mask without")));
}

TEST(SegmentationFolder, MissingFoldersAndSharedNamesAreErrorsSayingWhatToDo) {
  TempDir root;
  write_bytes(root / "images/a.jpg", distinct_bytes(1));
  EXPECT_THAT([&] { SegmentationFolder folder(root.path()); }, ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("masks")));
  write_bytes(root / "masks/a.png", distinct_bytes(2));
  write_bytes(root / "masks/a.tif", distinct_bytes(3));
  EXPECT_THAT([&] { SegmentationFolder folder(root.path()); },
              ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("share the name a")));
  fs::remove(root / "masks/a.tif");
  fs::remove(root / "images/a.jpg");
  write_bytes(root / "images/b.jpg", distinct_bytes(4));
  EXPECT_THROW(SegmentationFolder(root.path(), {.allow_unmatched = true}), std::runtime_error);  // no pair at all
}

// The folders are walked as ImageFolder walks them: a link back into the walk is not followed.
TEST(SegmentationFolder, ALinkBackIntoTheFolderIsListedNotWalkedForever) {
  TempDir root;
  write_bytes(root / "images/a.jpg", distinct_bytes(1));
  write_bytes(root / "masks/a.png", distinct_bytes(2));
  fs::create_directory_symlink(root / "masks", root / "masks/loop");
  const SegmentationFolder folder(root.path());
  EXPECT_EQ(folder.size(), 1u);
  std::vector<std::string> listed;
  for (const IgnoredFile& f : folder.ignored()) listed.push_back(f.path + ": " + f.reason);
  EXPECT_THAT(listed, ::testing::Contains(HasSubstr("loop: symbolic link to a folder that contains it")));
  EXPECT_THROW(folder.read(1), std::out_of_range);
}

// End to end with real files: a JPEG photo and a JPEG-stored mask (grey, so one channel), decoded
// into an Image whose mask has the photo's size.
TEST(SegmentationFolder, ADecoderGivesTheImageWithItsMask) {
  TempDir root;
  cv::Mat photo(24, 32, CV_8UC3, cv::Scalar(10, 120, 200));
  cv::Mat mask(24, 32, CV_8UC1, cv::Scalar(0));
  mask(cv::Rect(8, 8, 16, 8)).setTo(255);
  write_bytes(root / "images/x.jpg", encode_jpeg(photo));
  write_bytes(root / "masks/x.jpg", encode_jpeg(mask, 100));
  const SegmentationFolder folder(root.path());
  const Image image = Decoder().decode(folder.read(0));
  EXPECT_EQ(image.pixels.type(), CV_8UC3);
  ASSERT_EQ(image.mask.type(), CV_8UC1);
  ASSERT_EQ(image.mask.size(), image.pixels.size());
  EXPECT_GT(image.mask.at<std::uint8_t>(12, 16), 200);
  EXPECT_LT(image.mask.at<std::uint8_t>(2, 2), 50);
}

}  // namespace
}  // namespace stoke::nodes
