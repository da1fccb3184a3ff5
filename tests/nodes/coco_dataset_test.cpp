// CocoDataset: a COCO annotation file and its image folder as samples with boxes; malformed
// annotations, boxes outside their image and a missing image are accounted for and named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stoke/graph/pipeline.hpp>
#include <stoke/nodes/batch_pool.hpp>
#include <stoke/nodes/coco_dataset.hpp>
#include <stoke/nodes/collate.hpp>
#include <stoke/nodes/decode_augment.hpp>
#include <stoke/nodes/registry.hpp>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using ::testing::HasSubstr;
using Box = std::array<float, 4>;

// a.jpg, b.jpg and c.jpg (40x30) exist, missing.jpg does not. Categories by id: cat 1, bird 3,
// dog 7 -> classes 0, 1, 2. Annotations 102-105 are bad; c.jpg has none.
fs::path write_coco(const TempDir& dir) {
  for (const char* name : {"a.jpg", "b.jpg", "c.jpg"}) test::write_bytes(dir / "images" / name, test::small_jpeg(3, 40, 30));
  test::write_text(dir / "instances.json", R"({
    "images": [
      {"id": 10, "file_name": "a.jpg", "width": 40, "height": 30},
      {"id": 11, "file_name": "b.jpg", "width": 40, "height": 30},
      {"id": 12, "file_name": "missing.jpg", "width": 40, "height": 30},
      {"id": 13, "file_name": "c.jpg", "width": 40, "height": 30}],
    "categories": [{"id": 7, "name": "dog"}, {"id": 1, "name": "cat"}, {"id": 3, "name": "bird"}],
    "annotations": [
      {"id": 100, "image_id": 10, "category_id": 1, "bbox": [2, 3, 10, 5], "iscrowd": 0},
      {"id": 101, "image_id": 10, "category_id": 7, "bbox": [0, 0, 40, 30], "iscrowd": 1},
      {"id": 102, "image_id": 11, "category_id": 1, "bbox": [1, 2, 3]},
      {"id": 103, "image_id": 11, "category_id": 1, "bbox": [35, 0, 10, 10]},
      {"id": 104, "image_id": 99, "category_id": 1, "bbox": [0, 0, 1, 1]},
      {"id": 105, "image_id": 11, "category_id": 42, "bbox": [0, 0, 1, 1]},
      {"id": 106, "image_id": 11, "category_id": 3, "bbox": [0, 0, 5, 5]},
      {"id": 107, "image_id": 12, "category_id": 3, "bbox": [1, 1, 5, 5]}]
  })");
  return dir / "instances.json";
}

TEST(CocoDataset, ImagesComeWithTheirBoxesInPixelsAndClassesInIdOrder) {
  const TempDir dir;
  const CocoDataset coco(write_coco(dir), dir / "images");
  EXPECT_EQ(coco.classes(), (std::vector<std::string>{"cat", "bird", "dog"}));
  EXPECT_EQ(coco.category_ids(), (std::vector<std::int64_t>{1, 3, 7}));
  ASSERT_EQ(coco.size(), 4u);
  EXPECT_EQ(coco.boxes(), 4u);
  const Sample a = coco.read(0);
  EXPECT_EQ(a.name, (dir / "images" / "a.jpg").string());
  EXPECT_EQ(a.label, -1);
  EXPECT_EQ(a.boxes.xyxy, (std::vector<Box>{{2, 3, 12, 8}, {0, 0, 40, 30}}));
  EXPECT_EQ(a.boxes.classes, (std::vector<std::int32_t>{0, 2}));
  EXPECT_EQ(a.boxes.extras, 1);
  EXPECT_EQ(a.boxes.extra, (std::vector<float>{0, 1}));  // iscrowd
  EXPECT_EQ(coco.read(1).boxes.classes, (std::vector<std::int32_t>{1}));
  EXPECT_TRUE(coco.read(3).boxes.empty());
  // The missing file is found when it is read, named.
  try {
    (void)coco.read(2);
    FAIL() << "a missing image was read";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("missing.jpg"));
  }
}

TEST(CocoDataset, BadAnnotationsAreLeftOutAndNamedOrFailTheRun) {
  const TempDir dir;
  const fs::path file = write_coco(dir);
  const CocoDataset coco(file, dir / "images");
  std::vector<std::string> listed;
  for (const IgnoredFile& i : coco.ignored()) listed.push_back(i.path + ": " + i.reason);
  ASSERT_EQ(listed.size(), 4u);
  EXPECT_THAT(listed[0], HasSubstr("annotation 102: its bbox is not [x, y, width, height]"));
  EXPECT_THAT(listed[1], HasSubstr("annotation 103: its bbox [35,0,10,10] reaches outside its image b.jpg (40x30)"));
  EXPECT_THAT(listed[2], HasSubstr("annotation 104: its image_id is not an image of the file"));
  EXPECT_THAT(listed[3], HasSubstr("annotation 105: its category_id is not a category of the file"));
  EXPECT_THAT(listed[0], HasSubstr(file.string()));

  try {
    CocoDataset strict(file, dir / "images", {.on_bad = CocoOptions::OnBad::fail});
    FAIL() << "a bad annotation was accepted with on_bad = fail";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("annotation 102"));
  }
  const CocoDataset no_crowd(file, dir / "images", {.keep_crowd = false, .keep_empty = false});
  EXPECT_EQ(no_crowd.size(), 3u);  // c.jpg had no annotation
  EXPECT_EQ(no_crowd.read(0).boxes.classes, (std::vector<std::int32_t>{0}));

  test::write_text(dir / "not_coco.json", R"({"images": []})");
  EXPECT_THAT(test::error_message([&] { CocoDataset(dir / "not_coco.json", dir.path()); }), HasSubstr("not a COCO annotation file: no 'categories' array"));
  test::write_text(dir / "broken.json", "{\"images\": [");
  EXPECT_THAT(test::error_message([&] { CocoDataset(dir / "broken.json", dir.path()); }), HasSubstr("not valid JSON"));
}

// Found by coco_fuzz (nodes/fuzz): a category name or an iscrowd of another JSON type escaped as
// nlohmann::json's type_error instead of the documented std::runtime_error / a listed annotation.
TEST(CocoDataset, ValuesOfTheWrongJsonTypeAreNamedNotThrownAsJsonErrors) {
  const TempDir dir;
  test::write_text(dir / "name.json", R"({"images": [], "annotations": [], "categories": [{"id": 1, "name": 5}]})");
  EXPECT_THAT(test::error_message([&] { CocoDataset(dir / "name.json", dir.path()); }),
              HasSubstr("category 1: its name is not a string: 5"));
  test::write_text(dir / "crowd.json", R"({"images": [{"id": 1, "file_name": "a.jpg", "width": 9, "height": 9}],
    "annotations": [{"id": 7, "image_id": 1, "category_id": 1, "bbox": [0, 0, 1, 1], "iscrowd": "yes"},
                    {"id": 8, "image_id": 1, "category_id": 1, "bbox": [0, 0, 2, 2], "iscrowd": 1e300}],
    "categories": [{"id": 1}]})");
  const CocoDataset coco(dir / "crowd.json", dir.path());
  ASSERT_EQ(coco.ignored().size(), 1u);
  EXPECT_THAT(coco.ignored()[0].path + ": " + coco.ignored()[0].reason, HasSubstr("annotation 7: its iscrowd is not a number"));
  EXPECT_EQ(coco.boxes(), 1u);
  EXPECT_EQ(coco.classes(), (std::vector<std::string>{"1"}));
}

TEST(CocoDataset, InAPipelineEveryImageIsBatchedOrSkippedAndNamed) {
  const TempDir dir;
  const auto coco = std::make_shared<CocoDataset>(write_coco(dir), dir / "images");
  BatchShape shape{.batch_size = 4, .height = 16, .width = 16, .max_boxes = 4, .box_extras = 1};
  BatchPool pool(shape, 2);
  graph::Pipeline pipe({.threads = 2});
  std::vector<Batch> batches;
  pipe.source("source", DatasetSource(coco->size(), {.shuffle = false}))
      .map("read", ReadSample(coco), {.on_error = graph::OnError::skip})
      .map("decode", DecodeAugment(Decoder(), Augment(Registry::builtin().make_list({"resize size=16x16"}), 0)),
           {.on_error = graph::OnError::skip})
      .emit<Batch>("batch", Collate(pool), Collate::stage_options())
      .sink("sink", [&](Batch batch) { batches.push_back(std::move(batch)); });
  const graph::RunReport report = pipe.run();
  ASSERT_EQ(report.skipped_items.size(), 1u);
  EXPECT_THAT(report.skipped_items[0].reason, HasSubstr("missing.jpg"));
  ASSERT_EQ(batches.size(), 1u);
  const Batch& batch = batches[0];
  ASSERT_EQ(batch.size(), 3u);  // 4 read = 3 batched + 1 skipped
  EXPECT_EQ(std::vector<std::int32_t>(batch.box_counts().begin(), batch.box_counts().end()),
            (std::vector<std::int32_t>{2, 1, 0}));
  // a.jpg's first box, scaled from 40x30 to 16x16: x by 0.4, y by 16/30.
  EXPECT_FLOAT_EQ(batch.boxes()[0], 0.8f);
  EXPECT_FLOAT_EQ(batch.boxes()[1], 1.6f);
  EXPECT_FLOAT_EQ(batch.boxes()[2], 4.8f);
  EXPECT_FLOAT_EQ(batch.boxes()[3], 8.0f * 16.0f / 30.0f);
}

}  // namespace
}  // namespace stoke::nodes
