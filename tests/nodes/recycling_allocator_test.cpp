// RecyclingAllocator: a freed block serves the next matrix of its size, within the byte limit;
// Normalize's planes come from image_allocator().
#include <gtest/gtest.h>

#include <cstddef>
#include <opencv2/core.hpp>
#include <stoke/nodes/normalize.hpp>
#include <stoke/nodes/recycling_allocator.hpp>
#include <utility>

namespace stoke::nodes {
namespace {

constexpr std::size_t kMin = 1024;

cv::Mat made_by(const RecyclingAllocator& allocator, int rows, int cols) {
  cv::Mat m;
  m.allocator = const_cast<RecyclingAllocator*>(&allocator);
  m.create(rows, cols, CV_32FC1);
  return m;
}

TEST(RecyclingAllocator, AReleasedBlockServesTheNextMatrixOfItsSize) {
  const RecyclingAllocator allocator(1 << 20, kMin);
  cv::Mat first = made_by(allocator, 64, 64);  // 16 KiB
  const uchar* data = first.data;
  first.at<float>(3, 5) = 7.0f;
  first.release();
  EXPECT_EQ(allocator.cached_bytes(), 64u * 64u * 4u);
  const cv::Mat second = made_by(allocator, 64, 64);
  EXPECT_EQ(second.data, data);
  EXPECT_EQ(allocator.reused(), 1u);
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  EXPECT_TRUE(second.isContinuous());
  EXPECT_EQ(second.step[0], 64u * 4u);
}

TEST(RecyclingAllocator, AnotherSizeGetsABlockOfItsOwn) {
  const RecyclingAllocator allocator(1 << 20, kMin);
  made_by(allocator, 64, 64).release();
  const cv::Mat other = made_by(allocator, 32, 64);
  EXPECT_EQ(allocator.reused(), 0u);
  EXPECT_EQ(allocator.cached_bytes(), 64u * 64u * 4u);
}

TEST(RecyclingAllocator, ABlockStaysInUseUntilItsLastMatrixIsReleased) {
  const RecyclingAllocator allocator(1 << 20, kMin);
  cv::Mat first = made_by(allocator, 64, 64);
  cv::Mat view = first;  // NOLINT(performance-unnecessary-copy-initialization): a second reference
  first.release();
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  const cv::Mat other = made_by(allocator, 64, 64);
  EXPECT_NE(other.data, view.data);
  view.release();
  EXPECT_EQ(allocator.cached_bytes(), 64u * 64u * 4u);
}

TEST(RecyclingAllocator, KeepsNoMoreThanItsLimitAndNothingBelowItsSmallestBlock) {
  const std::size_t block = 64 * 64 * 4;
  const RecyclingAllocator allocator(block + block / 2, kMin);
  cv::Mat a = made_by(allocator, 64, 64);
  cv::Mat b = made_by(allocator, 64, 64);
  a.release();
  b.release();  // no room for a second block: freed
  EXPECT_EQ(allocator.cached_bytes(), block);
  made_by(allocator, 8, 8).release();  // 256 bytes: below the smallest kept block
  EXPECT_EQ(allocator.cached_bytes(), block);
}

TEST(RecyclingAllocator, TrimFreesWhatItKept) {
  const RecyclingAllocator allocator(1 << 20, kMin);
  made_by(allocator, 64, 64).release();
  made_by(allocator, 32, 64).release();
  EXPECT_EQ(allocator.cached_bytes(), 3u * 32u * 64u * 4u);
  allocator.trim();
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  made_by(allocator, 64, 64).release();  // and keeps again
  EXPECT_EQ(allocator.cached_bytes(), 64u * 64u * 4u);
  EXPECT_EQ(allocator.reused(), 0u);
}

TEST(RecyclingAllocator, NormalizesPlanesReuseTheBlockABatchedImageGaveBack) {
  cv::Mat pixels(224, 224, CV_8UC3, cv::Scalar(10, 128, 250));
  const Normalize normalize;
  ItemRng rng(0, 0, 0);
  Image first{.pixels = pixels, .name = {}};
  normalize(first, rng);
  const uchar* data = first.pixels.data;
  const float expected = first.pixels.at<float>(224 + 100, 100);  // green at (100, 100)
  const std::size_t reused = image_allocator().reused();
  first = Image{};  // batched and released
  Image second{.pixels = pixels, .name = {}};
  normalize(second, rng);
  EXPECT_EQ(second.pixels.data, data);
  EXPECT_EQ(image_allocator().reused(), reused + 1);
  EXPECT_EQ(second.pixels.at<float>(224 + 100, 100), expected);
}

}  // namespace
}  // namespace stoke::nodes
