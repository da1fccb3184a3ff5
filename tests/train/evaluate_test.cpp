// Evaluation and prediction (stoke/train/evaluate.hpp) on a tiny dataset: the figures agree with the
// confusion matrix and with the model's own outputs, unreadable files are skipped and named, and
// a dataset with other classes is refused with both names in the message.
#include "stoke/train/evaluate.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <stoke/nn/backend.hpp>
#include <stoke/nn/models.hpp>
#include <string>
#include <vector>

#include "train_test_support.hpp"

namespace stoke::train {
namespace {

namespace fs = std::filesystem;
using nodes::test::error_message;
using test::TempDir;
using ::testing::HasSubstr;

class Evaluate : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test::write_tiny_shapes(dir_);
    model_.card = {.model = "small_cnn",
                   .image_size = 16,
                   .classes = {"00_circle", "01_square"},
                   .eval_transforms = {"resize size=16", "normalize"}};
    model_.model = nn::make_model("small_cnn", {.classes = 2, .seed = 4});
  }
  fs::path val() const { return root_ / "val"; }

  TempDir dir_;
  fs::path root_;
  std::unique_ptr<nn::Backend> backend_ = nn::make_backend(gpu::Device::cpu());
  InferenceModel model_;
};

TEST_F(Evaluate, AccuracyAgreesWithTheConfusionMatrix) {
  const Evaluation e =
      evaluate(model_, open_dataset(val()), *backend_, {.batch_size = 3, .threads = 2, .progress = {}});
  EXPECT_EQ(e.images, 8);  // 2 classes x 4, the last batch partial
  EXPECT_EQ(e.skipped, 0u);
  ASSERT_EQ(e.confusion.classes(), 2u);
  EXPECT_EQ(e.confusion.row_total(0), 4u);
  EXPECT_EQ(e.confusion.row_total(1), 4u);
  EXPECT_DOUBLE_EQ(e.top1, e.confusion.accuracy());
  EXPECT_DOUBLE_EQ(e.top5, 1.0);  // two classes
  EXPECT_GT(e.loss, 0);
}

TEST_F(Evaluate, SkipsAndNamesAnUnreadableFile) {
  nodes::test::write_text(val() / "00_circle" / "broken.jpg", "not a JPEG");
  const Evaluation e = evaluate(model_, open_dataset(val()), *backend_);
  EXPECT_EQ(e.images, 8);
  EXPECT_EQ(e.skipped, 1u);
  ASSERT_EQ(e.skipped_files.size(), 1u);
  EXPECT_THAT(e.skipped_files[0].file, HasSubstr("broken.jpg"));
  EXPECT_EQ(e.confusion.total(), 8u);
}

TEST_F(Evaluate, ClassifyFilesKeepsTheOrderAndNamesFailures) {
  const std::string a = (val() / "00_circle" / "000000.jpg").string();
  const std::string b = (val() / "01_square" / "000003.jpg").string();
  const std::string missing = (dir_ / "missing.jpg").string();
  const std::vector<FilePrediction> out = classify_files(model_, {b, missing, a, b}, *backend_, 2);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].file, b);
  EXPECT_FALSE(out[1].ok());
  EXPECT_EQ(out[1].file, missing);
  EXPECT_THAT(out[1].error, HasSubstr("cannot open"));  // the file is named in .file
  for (std::size_t i : {0u, 2u, 3u}) {
    ASSERT_TRUE(out[i].ok()) << out[i].error;
    ASSERT_EQ(out[i].probabilities.size(), 2u);
    EXPECT_NEAR(std::accumulate(out[i].probabilities.begin(), out[i].probabilities.end(), 0.0), 1.0, 1e-5);
  }
  EXPECT_EQ(out[0].probabilities, out[3].probabilities);  // the same file, the same answer
}

TEST_F(Evaluate, OtherClassesAreRefusedNamingBothSides) {
  const nodes::DatasetPtr dataset = open_dataset(val());
  EXPECT_NO_THROW(check_classes(*dataset, "val", model_.card, "run.safetensors"));
  ModelCard other = model_.card;
  other.classes = {"00_circle", "01_box"};
  const std::string message = error_message([&] { check_classes(*dataset, "val", other, "run.safetensors"); });
  EXPECT_THAT(message, HasSubstr("val: its classes differ from those of run.safetensors"));
  EXPECT_THAT(message, HasSubstr("'01_square'"));
  EXPECT_THAT(message, HasSubstr("'01_box'"));
}

}  // namespace
}  // namespace stoke::train
