// Opening datasets (stoke/train/input.hpp, fit.hpp): what open_dataset makes of each kind of path
// and --format, the errors that name the path and the fix, and open_training_data's checks.
#include "stoke/train/input.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <stoke/nodes/cifar.hpp>
#include <stoke/nodes/file_list.hpp>
#include <stoke/nodes/image_folder.hpp>
#include <stoke/nodes/packed.hpp>
#include <string>

#include "dataset_test_support.hpp"
#include "stoke/train/fit.hpp"

namespace stoke::train {
namespace {

namespace fs = std::filesystem;
using nodes::test::error_message;
using nodes::test::small_jpeg;
using nodes::test::TempDir;
using nodes::test::write_bytes;
using nodes::test::write_text;
using ::testing::HasSubstr;

// dir/photos/{cat,dog}/N.jpg: `per_class` images each.
fs::path photo_folder(const TempDir& dir, const std::string& name, int per_class,
                      std::vector<std::string> classes = {"cat", "dog"}) {
  for (const std::string& c : classes) {
    for (int i = 0; i < per_class; ++i) write_bytes(dir / name / c / (std::to_string(i) + ".jpg"), small_jpeg(i));
  }
  return dir / name;
}

template <class T>
bool is(const nodes::DatasetPtr& dataset) {
  return dynamic_cast<const T*>(dataset.get()) != nullptr;
}

TEST(OpenDataset, TellsTheKindFromThePath) {
  const TempDir dir;
  const fs::path folder = photo_folder(dir, "photos", 2);
  write_text(dir / "list.csv", "photos/cat/0.jpg,0\nphotos/dog/1.jpg,1\n");
  nodes::PackWriter pack(dir / "photos.stoke", {"cat", "dog"});
  pack.add(small_jpeg(1), 0, "a.jpg");
  pack.finish();
  // A pack under another name is recognised by its magic.
  fs::copy_file(dir / "photos.stoke", dir / "no_extension");
  fs::copy_file(dir / "photos.stoke.idx", dir / "no_extension.idx");

  EXPECT_TRUE(is<nodes::ImageFolder>(open_dataset(folder)));
  EXPECT_TRUE(is<nodes::FileList>(open_dataset(dir / "list.csv")));
  EXPECT_THAT(open_dataset(dir / "list.csv")->name(1), HasSubstr("photos/dog/1.jpg"));  // relative to the list
  EXPECT_TRUE(is<nodes::PackedDataset>(open_dataset(dir / "photos.stoke")));
  EXPECT_TRUE(is<nodes::PackedDataset>(open_dataset(dir / "no_extension")));
  EXPECT_TRUE(is<nodes::ImageFolder>(open_dataset(folder, "folder")));
  EXPECT_TRUE(is<nodes::FileList>(open_dataset(dir / "list.csv", "filelist")));
  EXPECT_TRUE(is<nodes::PackedDataset>(open_dataset(dir / "photos.stoke", "packed")));
}

TEST(OpenDataset, ErrorsNameThePathAndTheFix) {
  const TempDir dir;
  const fs::path folder = photo_folder(dir, "photos", 1);
  write_text(dir / "x.stoke.idx", "index");
  const std::string missing = error_message([&] { open_dataset(dir / "missing"); });
  EXPECT_THAT(missing, HasSubstr((dir / "missing").string()));
  EXPECT_THAT(missing, HasSubstr("gen-shapes"));
  EXPECT_THAT(error_message([&] { open_dataset(dir / "x.stoke.idx"); }), HasSubstr("give the data file"));
  EXPECT_THAT(error_message([&] { open_dataset(folder, "packed"); }), HasSubstr("--format packed needs a file"));
  EXPECT_THAT(error_message([&] { open_dataset(dir / "x.stoke.idx", "folder"); }),
              HasSubstr("--format folder needs a folder"));
  EXPECT_THROW(open_dataset(folder, "tiff"), std::invalid_argument);
  EXPECT_THAT(error_message([&] { open_dataset(folder, "tiff"); }), HasSubstr("auto, folder, filelist, cifar"));
}

TEST(OpenTrainingData, FindsTheSiblingValidationFolder) {
  const TempDir dir;
  photo_folder(dir, "data/train", 2);
  photo_folder(dir, "data/val", 1);
  const TrainingData data = open_training_data(dir / "data" / "train", {}, "auto", 4);
  EXPECT_EQ(data.train->size(), 4u);
  ASSERT_NE(data.val, nullptr);
  EXPECT_EQ(data.val->size(), 2u);
  EXPECT_EQ(data.val_path, dir / "data" / "val");

  // Not a folder named "train": no validation unless one is given.
  photo_folder(dir, "other", 2);
  EXPECT_EQ(open_training_data(dir / "other").val, nullptr);
  EXPECT_NE(open_training_data(dir / "other", dir / "data" / "val").val, nullptr);
}

TEST(OpenTrainingData, RefusesWhatCannotBeTrainedOn) {
  const TempDir dir;
  const fs::path two = photo_folder(dir, "two", 2);
  const fs::path one_class = photo_folder(dir, "one_class", 4, {"only"});
  const fs::path other_classes = photo_folder(dir, "other_classes", 1, {"cat", "mouse"});
  EXPECT_THAT(error_message([&] { open_training_data(two, {}, "auto", 8); }),
              HasSubstr(two.string() + " has 4 images, fewer than one batch of 8"));
  EXPECT_THAT(error_message([&] { open_training_data(one_class); }), HasSubstr("needs at least two"));
  const std::string message = error_message([&] { open_training_data(two, other_classes); });
  EXPECT_THAT(message, HasSubstr(other_classes.string() + " has other classes than " + two.string()));
}

TEST(EvaluationInput, KeepsThePipelineAndEvaluatesInOrder) {
  InputConfig train;
  train.batch_size = 32;
  train.size = 48;
  train.threads = 3;
  train.drop_last = true;
  train.on_error = graph::OnError::fail;
  const InputConfig val = evaluation_input(train, {"resize size=48", "normalize"});
  EXPECT_EQ(val.batch_size, 32u);
  EXPECT_EQ(val.size, 48);
  EXPECT_EQ(val.threads, 3);
  EXPECT_EQ(val.on_error, graph::OnError::fail);
  EXPECT_FALSE(val.shuffle);
  EXPECT_FALSE(val.drop_last);
  EXPECT_EQ(val.tuning.target, "evaluate");
  EXPECT_EQ(val.transforms.size(), 2u);
}

}  // namespace
}  // namespace stoke::train
