// Metrics (stoke/train/metrics.hpp): top-k with ties, the top classes of a row, softmax rows and the
// confusion matrix on known predictions.
#include "stoke/train/metrics.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace stoke::train {
namespace {

using ::testing::ElementsAre;

TEST(TopK, TiesFavourTheLabel) {
  const std::vector<float> row{0.5f, 0.9f, 0.5f, 0.1f};
  EXPECT_TRUE(in_top_k(row, 1, 1));
  EXPECT_FALSE(in_top_k(row, 0, 1));
  EXPECT_TRUE(in_top_k(row, 0, 2));  // one class scores higher; the tie with class 2 counts for it
  EXPECT_TRUE(in_top_k(row, 2, 2));
  EXPECT_FALSE(in_top_k(row, 3, 3));
  EXPECT_TRUE(in_top_k(row, 3, 4));
}

// Found by UBSan (scripts/asan.sh, `stoke classify`): an unlabelled item (-1) read row[-1].
TEST(TopK, AnUnlabelledItemOrALabelPastTheClassesIsInNoTopK) {
  const std::vector<float> row{0.5f, 0.9f};
  EXPECT_FALSE(in_top_k(row, -1, 2));
  EXPECT_FALSE(in_top_k(row, 2, 2));
}

TEST(TopK, TheTopClassesPutEqualScoresInClassOrder) {
  const std::vector<float> row{0.2f, 0.7f, 0.2f, 0.7f, 0.1f};
  EXPECT_THAT(top_classes(row, 3), ElementsAre(1u, 3u, 0u));
  EXPECT_THAT(top_classes(row, 10), ElementsAre(1u, 3u, 0u, 2u, 4u));  // at most the row's size
  EXPECT_TRUE(top_classes(row, 0).empty());
  EXPECT_EQ(argmax(row), 1u);  // the first of the largest
  EXPECT_EQ(argmax({}), 0u);
}

TEST(Softmax, RowsSumToOneAndKeepTheOrder) {
  const std::vector<float> logits{1.0f, 2.0f, 3.0f, 1000.0f, 1000.0f, -1000.0f};
  const std::vector<float> p = softmax_rows(logits, 3);
  ASSERT_EQ(p.size(), 6u);
  EXPECT_NEAR(p[0] + p[1] + p[2], 1.0, 1e-6);
  EXPECT_LT(p[0], p[1]);
  EXPECT_LT(p[1], p[2]);
  EXPECT_NEAR(p[3], 0.5, 1e-6);  // large logits do not overflow
  EXPECT_NEAR(p[5], 0.0, 1e-6);
  EXPECT_THROW(softmax_rows(logits, 4), std::invalid_argument);
  EXPECT_THROW(softmax_rows(logits, 0), std::invalid_argument);
}

// Three classes, 10 images: class 0 (4 images) right 3 times and once taken for 2; class 1 (3)
// taken for 0 twice; class 2 (3) right every time.
ConfusionMatrix known() {
  ConfusionMatrix m(3);
  for (int i = 0; i < 3; ++i) m.add(0, 0);
  m.add(0, 2);
  m.add(1, 1);
  m.add(1, 0);
  m.add(1, 0);
  for (int i = 0; i < 3; ++i) m.add(2, 2);
  return m;
}

TEST(Confusion, CountsRowsTotalsAndAccuracy) {
  const ConfusionMatrix m = known();
  EXPECT_EQ(m.classes(), 3u);
  EXPECT_THAT(m.rows(), ElementsAre(ElementsAre(3u, 0u, 1u), ElementsAre(2u, 1u, 0u), ElementsAre(0u, 0u, 3u)));
  EXPECT_EQ(m.at(1, 0), 2u);
  EXPECT_EQ(m.row_total(0), 4u);
  EXPECT_EQ(m.total(), 10u);
  EXPECT_EQ(m.correct(), 7u);
  EXPECT_DOUBLE_EQ(m.accuracy(), 0.7);
  EXPECT_DOUBLE_EQ(ConfusionMatrix(2).accuracy(), 0.0);
}

TEST(Confusion, MostConfusedPairsComeMostImagesFirstTiesInClassOrder) {
  ConfusionMatrix m = known();
  m.add(2, 1);  // a second pair with one image, after (0 -> 2) in class order
  EXPECT_EQ(m.pair_count(), 3u);
  const auto pairs = m.most_confused(10);
  ASSERT_EQ(pairs.size(), 3u);
  EXPECT_EQ(pairs[0].truth, 1u);
  EXPECT_EQ(pairs[0].predicted, 0u);
  EXPECT_EQ(pairs[0].count, 2u);
  EXPECT_DOUBLE_EQ(pairs[0].share, 2.0 / 3.0);
  EXPECT_EQ(pairs[1].truth, 0u);
  EXPECT_EQ(pairs[1].predicted, 2u);
  EXPECT_DOUBLE_EQ(pairs[1].share, 0.25);
  EXPECT_EQ(pairs[2].truth, 2u);
  EXPECT_EQ(pairs[2].predicted, 1u);
  EXPECT_EQ(m.most_confused(1).size(), 1u);
}

TEST(Confusion, RefusesAClassOutsideTheMatrix) {
  ConfusionMatrix m(2);
  EXPECT_THROW(m.add(2, 0), std::out_of_range);
  EXPECT_THROW(m.add(0, 5), std::out_of_range);
  EXPECT_EQ(m.total(), 0u);
}

}  // namespace
}  // namespace stoke::train
