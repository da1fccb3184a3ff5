// RecyclingAllocator: a released matrix's block serves the next large matrix of its size class;
// small matrices are OpenCV's own; decoded crops, their resizes and Normalize's planes come from
// image_allocator().
#include <gtest/gtest.h>

#include <cstddef>
#include <opencv2/core.hpp>
#include <stoke/nodes/decode.hpp>
#include <stoke/nodes/jpeg_encode.hpp>
#include <stoke/nodes/normalize.hpp>
#include <stoke/nodes/random_horizontal_flip.hpp>
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

TEST(RecyclingAllocator, MatricesOfNearbySizesShareABlock) {
  const RecyclingAllocator allocator(1 << 22, kMin);
  cv::Mat first = made_by(allocator, 300, 300);  // 360,000 bytes: a block of 360,448 (256 KiB + 3 x 32 KiB)
  const uchar* data = first.data;
  first.release();
  EXPECT_EQ(allocator.cache().cached_bytes(), 360448u);
  cv::Mat smaller = made_by(allocator, 299, 300);  // 358,800 bytes: the same size class
  EXPECT_EQ(smaller.data, data);
  EXPECT_EQ(allocator.cache().reused(), 1u);
  EXPECT_EQ(smaller.step[0], 300u * 4u);  // laid out for its own size, not the block's
  smaller.release();
  EXPECT_EQ(allocator.cache().cached_bytes(), 360448u);
  const cv::Mat larger = made_by(allocator, 301, 300);  // 361,200 bytes: the next class up
  EXPECT_NE(larger.data, data);
  EXPECT_EQ(allocator.cache().reused(), 1u);
}

// A decoded crop, its resize and its flip are made per image: each is a block an earlier image
// gave back rather than pages faulted in afresh.
TEST(RecyclingAllocator, DecodedCropsAndTheirTransformsReuseBlocks) {
  cv::Mat picture(375, 500, CV_8UC3);
  cv::randu(picture, 0, 256);
  Sample sample;
  sample.bytes = Bytes(encode_jpeg(picture));
  sample.name = "noise.jpg";
  const Decoder decoder;
  const RandomHorizontalFlip flip(1.0);
  ItemRng rng(0, 0, 0);
  const auto decode = [&](cv::Rect crop, cv::Size out) {
    Image image = decoder.decode(sample, Region{crop, out});
    EXPECT_EQ(image.pixels.u->currAllocator, &image_allocator()) << crop << " -> " << out;
    flip(image, rng);
    EXPECT_EQ(image.pixels.u->currAllocator, &image_allocator());
    return image;
  };
  decode(cv::Rect(20, 10, 400, 300), cv::Size(224, 224));  // warms the cache up
  const std::size_t reused = image_allocator().cache().reused();
  // An exact crop (no DCT scaling) and a scaled one, of sizes other than the first's.
  const Image exact = decode(cv::Rect(30, 40, 300, 250), cv::Size(224, 224));
  EXPECT_GE(image_allocator().cache().reused(), reused + 2);  // the 224 x 224 output and its flip
  const Image whole = decoder.decode(sample);  // 562,500 bytes
  EXPECT_EQ(whole.pixels.u->currAllocator, &image_allocator());
  EXPECT_EQ(whole.pixels.size(), cv::Size(500, 375));
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
