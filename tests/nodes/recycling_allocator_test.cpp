// RecyclingAllocator: a released matrix's block serves the next large matrix of its size; small
// matrices are OpenCV's own; Normalize's planes come from image_allocator().
#include <gtest/gtest.h>

#include <cstddef>
#include <opencv2/core.hpp>
#include <stoke/nodes/normalize.hpp>
#include <stoke/nodes/recycling_allocator.hpp>

namespace stoke::nodes {
namespace {

constexpr std::size_t kMin = 1024;

cv::Mat made_by(const RecyclingAllocator& allocator, int rows, int cols) {
  cv::Mat m;
  m.allocator = const_cast<RecyclingAllocator*>(&allocator);
  m.create(rows, cols, CV_32FC1);
  return m;
}

TEST(RecyclingAllocator, AReleasedMatrixsBlockServesTheNextOfItsSize) {
  const RecyclingAllocator allocator(1 << 20, kMin);
  cv::Mat first = made_by(allocator, 64, 64);  // 16 KiB
  const uchar* data = first.data;
  first.release();
  EXPECT_EQ(allocator.cache().cached_bytes(), 64u * 64u * 4u);
  const cv::Mat second = made_by(allocator, 64, 64);
  EXPECT_EQ(second.data, data);
  EXPECT_EQ(allocator.cache().reused(), 1u);
  EXPECT_TRUE(second.isContinuous());
  EXPECT_EQ(second.step[0], 64u * 4u);
  EXPECT_EQ(second.step[1], 4u);
}

TEST(RecyclingAllocator, ABlockStaysInUseUntilItsLastMatrixIsReleased) {
  const RecyclingAllocator allocator(1 << 20, kMin);
  cv::Mat first = made_by(allocator, 64, 64);
  cv::Mat view = first;  // NOLINT(performance-unnecessary-copy-initialization): a second reference
  first.release();
  EXPECT_EQ(allocator.cache().cached_bytes(), 0u);
  const cv::Mat other = made_by(allocator, 64, 64);
  EXPECT_NE(other.data, view.data);
  view.release();
  EXPECT_EQ(allocator.cache().cached_bytes(), 64u * 64u * 4u);
}

TEST(RecyclingAllocator, SmallMatricesAreOpenCVsOwn) {
  const RecyclingAllocator allocator(1 << 20, kMin);
  cv::Mat small = made_by(allocator, 8, 8);  // 256 bytes: below the smallest kept block
  small.at<float>(7, 7) = 1.0f;
  small.release();
  EXPECT_EQ(allocator.cache().cached_bytes(), 0u);
}

TEST(RecyclingAllocator, NormalizesPlanesReuseTheBlockABatchedImageGaveBack) {
  cv::Mat pixels(224, 224, CV_8UC3, cv::Scalar(10, 128, 250));
  const Normalize normalize;
  ItemRng rng(0, 0, 0);
  Image first{.pixels = pixels, .name = {}};
  normalize(first, rng);
  const uchar* data = first.pixels.data;
  const float expected = first.pixels.at<float>(224 + 100, 100);  // green at (100, 100)
  const std::size_t reused = image_allocator().cache().reused();
  first = Image{};  // batched and released
  Image second{.pixels = pixels, .name = {}};
  normalize(second, rng);
  EXPECT_EQ(second.pixels.data, data);
  EXPECT_EQ(image_allocator().cache().reused(), reused + 1);
  EXPECT_EQ(second.pixels.at<float>(224 + 100, 100), expected);
}

}  // namespace
}  // namespace stoke::nodes
