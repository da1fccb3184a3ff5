// The shapes dataset: class list, drawing, rendering and the ImageFolder writer behind
// `stoke gen-shapes`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <opencv2/core.hpp>
#include <set>
#include <stoke/nodes/sample.hpp>
#include <stoke/nodes/shapes.hpp>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

/// What the JPEG's markers say: start/end of image, and the frame header (SOFn).
struct JpegInfo {
  bool starts_with_soi = false;
  bool ends_with_eoi = false;
  int width = 0;
  int height = 0;
  int components = 0;
};

JpegInfo parse_jpeg(const std::vector<std::byte>& file) {
  const auto at = [&](std::size_t i) { return std::to_integer<int>(file[i]); };
  JpegInfo info;
  const std::size_t n = file.size();
  if (n < 4) return info;
  info.starts_with_soi = at(0) == 0xFF && at(1) == 0xD8;
  info.ends_with_eoi = at(n - 2) == 0xFF && at(n - 1) == 0xD9;
  // Walk the marker segments after SOI up to the first SOFn (baseline C0, extended C1,
  // progressive C2) or the start of scan.
  std::size_t pos = 2;
  while (pos + 4 <= n && at(pos) == 0xFF) {
    const int marker = at(pos + 1);
    const std::size_t length = static_cast<std::size_t>(at(pos + 2) << 8 | at(pos + 3));
    if (marker >= 0xC0 && marker <= 0xC2 && pos + 10 <= n) {
      info.height = at(pos + 5) << 8 | at(pos + 6);
      info.width = at(pos + 7) << 8 | at(pos + 8);
      info.components = at(pos + 9);
      break;
    }
    if (marker == 0xDA) break;
    pos += 2 + length;
  }
  return info;
}

/// Fraction of pixels where a and b differ by more than `tolerance` in some channel.
double differing_fraction(const cv::Mat& a, const cv::Mat& b, int tolerance = 40) {
  cv::Mat diff;
  cv::absdiff(a, b, diff);
  std::vector<cv::Mat> channels;
  cv::split(diff, channels);
  cv::Mat most = cv::max(cv::max(channels[0], channels[1]), channels[2]);
  return static_cast<double>(cv::countNonZero(most > tolerance)) / static_cast<double>(a.total());
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& path : files_in(dir)) names.push_back(path.filename().string());
  return names;
}

TEST(ShapeClasses, NamesSortInClassOrderFilledThenOutlined) {
  const auto classes = shape_classes(max_shape_classes);
  ASSERT_EQ(classes.size(), 24u);
  EXPECT_EQ(classes[0].name, "00_circle");
  EXPECT_EQ(classes[1].name, "01_square");
  EXPECT_EQ(classes[11].name, "11_crescent");
  EXPECT_EQ(classes[12].name, "12_circle_outline");
  EXPECT_FALSE(classes[12].filled);
  EXPECT_EQ(classes[12].kind, ShapeKind::circle);
  std::vector<std::string> names;
  for (const auto& c : classes) names.push_back(c.name);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_EQ(shape_classes(3).size(), 3u);
  EXPECT_THROW(shape_classes(0), std::invalid_argument);
  EXPECT_THROW(shape_classes(max_shape_classes + 1), std::invalid_argument);
}

// The same place, size, rotation and colour: every class must still give its own picture.
TEST(DrawShape, EveryClassDrawsADifferentShape) {
  const auto classes = shape_classes(max_shape_classes);
  std::vector<cv::Mat> drawn;
  for (const auto& c : classes) {
    cv::Mat image(64, 64, CV_8UC3, cv::Scalar(0, 0, 0));
    draw_shape(
        image, c,
        ShapeParams{
            .center = {32, 32}, .radius = 26, .angle = 0.3, .aspect = 1.0, .colour = {255, 255, 255}, .thickness = 3});
    const double covered = static_cast<double>(cv::countNonZero(image.reshape(1) > 127)) / (64.0 * 64 * 3);
    EXPECT_GT(covered, 0.03) << c.name << " drew almost nothing";
    EXPECT_LT(covered, 0.8) << c.name << " filled the image";
    drawn.push_back(image);
  }
  for (std::size_t a = 0; a < drawn.size(); ++a)
    for (std::size_t b = a + 1; b < drawn.size(); ++b)
      EXPECT_GT(differing_fraction(drawn[a], drawn[b]), 0.02)
          << classes[a].name << " and " << classes[b].name << " look the same";
}

TEST(RenderShapeImage, IsAFunctionOfTheRngState) {
  const auto classes = shape_classes(4);
  ItemRng a = shapes_rng(5, ShapesSplit::train, 17);
  ItemRng b = shapes_rng(5, ShapesSplit::train, 17);
  const cv::Mat first = render_shape_image(classes[2], 48, a);
  const cv::Mat second = render_shape_image(classes[2], 48, b);
  ASSERT_EQ(first.type(), CV_8UC3);
  ASSERT_EQ(first.size(), cv::Size(48, 48));
  EXPECT_EQ(cv::norm(first, second, cv::NORM_INF), 0.0);

  // Another item of the same class: another colour, place, size and background.
  ItemRng c = shapes_rng(5, ShapesSplit::train, 18);
  EXPECT_GT(differing_fraction(first, render_shape_image(classes[2], 48, c)), 0.3);
  // The split is part of the key.
  ItemRng d = shapes_rng(5, ShapesSplit::val, 17);
  EXPECT_GT(differing_fraction(first, render_shape_image(classes[2], 48, d)), 0.3);
  EXPECT_THROW(render_shape_image(classes[0], 8, c), std::invalid_argument);
}

// With the same random key, two classes draw the same background, colours and placement, so
// what differs is the shape alone: it must differ for every pair of classes and every item.
TEST(RenderShapeImage, ClassesDifferUnderTheSameRandomKey) {
  const auto classes = shape_classes(max_shape_classes);
  for (std::uint64_t index = 0; index < 4; ++index) {
    std::vector<cv::Mat> images;
    for (const auto& c : classes) {
      ItemRng rng = shapes_rng(11, ShapesSplit::train, index);
      images.push_back(render_shape_image(c, 64, rng));
    }
    for (std::size_t a = 0; a < images.size(); ++a)
      for (std::size_t b = a + 1; b < images.size(); ++b)
        EXPECT_GT(differing_fraction(images[a], images[b]), 0.01)
            << classes[a].name << " vs " << classes[b].name << ", item " << index;
  }
}

TEST(WriteShapesDataset, WritesAnImageFolderOfValidJpegsOfTheAskedSize) {
  TempDir dir;
  const fs::path out = dir.path() / "shapes";
  std::vector<std::size_t> progress;
  std::size_t progress_total = 0;
  const ShapesDatasetReport report = write_shapes_dataset({.out = out,
                                                           .classes = 3,
                                                           .train_per_class = 5,
                                                           .val_per_class = 2,
                                                           .size = 40,
                                                           .seed = 7,
                                                           .quality = 85,
                                                           .threads = 2},
                                                          [&](std::size_t done, std::size_t total) {
                                                            progress.push_back(done);
                                                            progress_total = total;
                                                          });
  EXPECT_EQ(report.train_images, 15u);
  EXPECT_EQ(report.val_images, 6u);
  EXPECT_EQ(report.classes, (std::vector<std::string>{"00_circle", "01_square", "02_triangle"}));
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back(), 21u);
  EXPECT_EQ(progress_total, 21u);
  EXPECT_TRUE(std::is_sorted(progress.begin(), progress.end()));

  EXPECT_EQ(names_in(out), (std::vector<std::string>{"train", "val"}));
  std::uintmax_t bytes = 0;
  for (const auto& [split, per_class] : {std::pair{"train", 5}, std::pair{"val", 2}}) {
    ASSERT_EQ(names_in(out / split), report.classes) << split;
    for (const auto& c : report.classes) {
      const auto files = files_in(out / split / c);
      ASSERT_EQ(files.size(), static_cast<std::size_t>(per_class)) << split << "/" << c;
      EXPECT_EQ(files.front().filename(), "000000.jpg");
      for (const auto& file : files) {
        EXPECT_EQ(file.extension(), ".jpg") << file;
        const auto data = read_file(file.string());
        bytes += data.size();
        const JpegInfo info = parse_jpeg(data);
        EXPECT_TRUE(info.starts_with_soi) << file;
        EXPECT_TRUE(info.ends_with_eoi) << file;
        EXPECT_EQ(info.width, 40) << file;
        EXPECT_EQ(info.height, 40) << file;
        EXPECT_EQ(info.components, 3) << file;
      }
    }
  }
  EXPECT_EQ(bytes, report.bytes);
}

TEST(WriteShapesDataset, SameSeedGivesIdenticalBytesWhateverTheThreads) {
  TempDir dir;
  ShapesDatasetOptions options{.out = dir.path() / "a",
                               .classes = 4,
                               .train_per_class = 6,
                               .val_per_class = 2,
                               .size = 32,
                               .seed = 99,
                               .threads = 1};
  write_shapes_dataset(options);
  options.out = dir.path() / "b";
  options.threads = 2;
  write_shapes_dataset(options);
  options.out = dir.path() / "c";
  options.seed = 100;
  write_shapes_dataset(options);

  std::size_t compared = 0;
  std::size_t differ_with_other_seed = 0;
  for (const auto& entry : fs::recursive_directory_iterator(dir.path() / "a")) {
    if (!entry.is_regular_file()) continue;
    const fs::path relative = fs::relative(entry.path(), dir.path() / "a");
    const auto a = read_file(entry.path().string());
    EXPECT_EQ(a, read_file((dir.path() / "b" / relative).string())) << relative;
    if (a != read_file((dir.path() / "c" / relative).string())) ++differ_with_other_seed;
    ++compared;
  }
  EXPECT_EQ(compared, 4u * (6 + 2));
  EXPECT_EQ(differ_with_other_seed, compared);
}

TEST(WriteShapesDataset, RefusesANonEmptyDirectoryUnlessForced) {
  TempDir dir;
  const fs::path out = dir.path() / "data";
  fs::create_directories(out / "train" / "07_stale");
  std::ofstream(out / "notes.txt") << "mine";
  const ShapesDatasetOptions options{.out = out, .classes = 2, .train_per_class = 1, .val_per_class = 0, .size = 16};
  try {
    write_shapes_dataset(options);
    FAIL() << "wrote into a non-empty directory";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(out.string()), std::string::npos) << message;
    EXPECT_NE(message.find("--force"), std::string::npos) << message;
  }
  EXPECT_TRUE(fs::exists(out / "train" / "07_stale"));

  ShapesDatasetOptions forced = options;
  forced.force = true;
  write_shapes_dataset(forced);
  EXPECT_EQ(names_in(out / "train"), (std::vector<std::string>{"00_circle", "01_square"}));
  EXPECT_FALSE(fs::exists(out / "val"));  // val_per_class = 0
  EXPECT_TRUE(fs::exists(out / "notes.txt")) << "--force touched a file outside train/ and val/";
}

TEST(WriteShapesDataset, RejectsBadOptionsAndAFileAsRoot) {
  TempDir dir;
  const fs::path file = dir.path() / "a-file";
  std::ofstream(file) << "x";
  try {
    write_shapes_dataset({.out = file, .classes = 2, .train_per_class = 1, .size = 16});
    FAIL() << "used a file as the dataset root";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(file.string()), std::string::npos) << error.what();
  }
  const fs::path out = dir.path() / "out";
  EXPECT_THROW(write_shapes_dataset({.out = out, .classes = 0}), std::invalid_argument);
  EXPECT_THROW(write_shapes_dataset({.out = out, .classes = 2, .size = 8}), std::invalid_argument);
  EXPECT_THROW(write_shapes_dataset({.out = out, .classes = 2, .size = 16, .quality = 0}), std::invalid_argument);
  EXPECT_THROW(write_shapes_dataset({.out = out, .classes = 2, .train_per_class = 0, .size = 16}),
               std::invalid_argument);
  EXPECT_FALSE(fs::exists(out)) << "bad options still created the directory";
}

}  // namespace
}  // namespace stoke::nodes
