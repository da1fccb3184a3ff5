// stoke::imgcodecs: other formats through cv::imdecode, plugged into the Decoder.
#include "stoke/nodes/opencv_codec.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "decode_test_support.hpp"
#include "stoke/nodes/decode.hpp"

namespace stoke::nodes {
namespace {

using test::make_sample;

std::string fixture_path(const std::string& file) { return std::string(STOKE_TEST_DATA_DIR) + "/" + file; }

Decoder opencv_decoder() {
  DecodeOptions options;
  options.other_formats = opencv_codec();
  return Decoder(options);
}

// `image` (RGB, or gray/BGRA as OpenCV takes them) encoded by OpenCV in the format of `ext`.
std::vector<std::byte> encode(const std::string& ext, const cv::Mat& image, std::vector<int> params = {}) {
  std::vector<uchar> buffer;
  if (!cv::imencode(ext, image, buffer, params)) throw std::runtime_error("imencode " + ext + " failed");
  const auto* begin = reinterpret_cast<const std::byte*>(buffer.data());
  return {begin, begin + buffer.size()};
}

TEST(OpenCvCodec, PngFixtureDecodesToItsKnownPixels) {
  // decode_tiny.png was written by PIL with pixel (x, y) = (32x, 40y, 255 - 16x - 10y) in RGB.
  const Image image = opencv_decoder().decode(make_sample(read_file(fixture_path("decode_tiny.png")), "tiny.png"));
  ASSERT_EQ(image.pixels.size(), cv::Size(8, 6));
  ASSERT_EQ(image.pixels.type(), CV_8UC3);
  for (int y = 0; y < 6; ++y) {
    for (int x = 0; x < 8; ++x) {
      EXPECT_EQ(image.pixels.at<cv::Vec3b>(y, x), cv::Vec3b(32 * x, 40 * y, 255 - 16 * x - 10 * y)) << x << "," << y;
    }
  }
}

struct LosslessCase {
  const char* ext;
  ImageFormat format;
  std::vector<int> params;
};

class OpenCvLossless : public ::testing::TestWithParam<LosslessCase> {};

TEST_P(OpenCvLossless, RoundTripsExactlyAndProbesFromTheHeader) {
  const LosslessCase& c = GetParam();
  const cv::Mat rgb = test::test_picture(37, 23);
  cv::Mat bgr;
  cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  const Sample sample = make_sample(encode(c.ext, bgr, c.params), std::string("picture") + c.ext);
  ASSERT_EQ(detect_format(sample.bytes.span()), c.format);

  std::atomic<int> calls = 0;
  DecodeOptions options;
  options.other_formats = [&calls, codec = opencv_codec()](std::span<const std::byte> bytes, const std::string& name) {
    ++calls;
    return codec(bytes, name);
  };
  const Decoder decoder(options);
  const ImageInfo info = decoder.probe(sample);
  EXPECT_EQ(info.format, c.format);
  EXPECT_EQ(info.width, 37);
  EXPECT_EQ(info.height, 23);
  EXPECT_EQ(calls, 0) << "probe decoded the image";
  const cv::Mat decoded = decoder.decode(sample).pixels;
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(decoded.size(), rgb.size());
  EXPECT_EQ(cv::norm(decoded, rgb, cv::NORM_INF), 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, OpenCvLossless,
                         ::testing::Values(LosslessCase{".png", ImageFormat::png, {}},
                                           LosslessCase{".bmp", ImageFormat::bmp, {}},
                                           LosslessCase{".tiff", ImageFormat::tiff, {}},
                                           LosslessCase{".ppm", ImageFormat::pnm, {}},
                                           LosslessCase{".webp", ImageFormat::webp, {cv::IMWRITE_WEBP_QUALITY, 101}}),
                         [](const auto& p) { return std::string(p.param.ext + 1); });

TEST(OpenCvCodec, GrayAlphaAndSixteenBitBecomeEightBitRgb) {
  const Decoder decoder = opencv_decoder();
  cv::Mat gray(5, 6, CV_8UC1);
  cv::randu(gray, 0, 255);
  const cv::Mat from_gray = decoder.decode(make_sample(encode(".png", gray), "gray.png")).pixels;
  cv::Mat gray3;
  cv::cvtColor(gray, gray3, cv::COLOR_GRAY2RGB);
  EXPECT_EQ(cv::norm(from_gray, gray3, cv::NORM_INF), 0);

  cv::Mat bgra(5, 6, CV_8UC4, cv::Scalar(10, 20, 30, 40));  // B, G, R, alpha
  const cv::Mat from_bgra = decoder.decode(make_sample(encode(".png", bgra), "alpha.png")).pixels;
  ASSERT_EQ(from_bgra.type(), CV_8UC3);
  EXPECT_EQ(from_bgra.at<cv::Vec3b>(2, 3), cv::Vec3b(30, 20, 10));

  const cv::Mat deep(4, 4, CV_16UC3, cv::Scalar(0x1234, 0x5678, 0x9ABC));  // B, G, R
  const cv::Mat from_deep = decoder.decode(make_sample(encode(".png", deep), "deep.png")).pixels;
  ASSERT_EQ(from_deep.type(), CV_8UC3);
  EXPECT_EQ(from_deep.at<cv::Vec3b>(1, 1), cv::Vec3b(0x9A, 0x56, 0x12));
}

TEST(OpenCvCodec, RegionsAreCroppedAndResized) {
  const Sample sample = make_sample(read_file(fixture_path("decode_tiny.png")), "tiny.png");
  const Image image = opencv_decoder().decode(sample, Region{cv::Rect(2, 1, 4, 4), cv::Size(2, 2)});
  ASSERT_EQ(image.pixels.size(), cv::Size(2, 2));
  // Area averaging of the 2x2 blocks: top-left block is x = 2..3, y = 1..2.
  EXPECT_EQ(image.pixels.at<cv::Vec3b>(0, 0), cv::Vec3b(80, 60, 255 - 40 - 15));
}

TEST(OpenCvCodec, DamagedOrUnreadableInputIsADecodeErrorNamingTheFile) {
  const Decoder decoder = opencv_decoder();
  std::vector<std::byte> png = read_file(fixture_path("decode_tiny.png"));
  png.resize(png.size() / 2);
  std::vector<Sample> bad = {make_sample(png, "half.png")};
  if (!cv::haveImageReader(fixture_path("decode_tiny.gif"))) {  // OpenCV 4.6 reads no GIF
    bad.push_back(make_sample(read_file(fixture_path("decode_tiny.gif")), "tiny.gif"));
  }
  for (const Sample& sample : bad) {
    try {
      decoder.decode(sample);
      ADD_FAILURE() << sample.name << " decoded";
    } catch (const DecodeError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(sample.name + ": ", 0), 0u) << e.what();
    }
  }
}

TEST(OpenCvCodec, OversizedHeaderIsRefusedBeforeOpenCvSeesIt) {
  std::vector<std::byte> png = read_file(fixture_path("decode_tiny.png"));
  png[16] = std::byte{0x01};  // IHDR width 0x01000008: 16 million pixels wide
  try {
    opencv_decoder().decode(make_sample(png, "wide.png"));
    FAIL() << "expected a DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("wide.png: PNG: 16777224x6 = 100663344 pixels exceeds"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace stoke::nodes

namespace stoke::nodes {
namespace {

// DecodeColor::keep: 16-bit PNGs come back as uint16, bit for bit, grey as one channel and colour
// in RGB order, through a whole decode and a crop that needs no resampling.
TEST(OpenCvCodecKeep, SixteenBitPngsSurviveDecodeAndCropBitExactly) {
  cv::Mat grey(9, 11, CV_16UC1);
  cv::Mat rgb(9, 11, CV_16UC3);
  for (int y = 0; y < 9; ++y) {
    for (int x = 0; x < 11; ++x) {
      grey.at<std::uint16_t>(y, x) = static_cast<std::uint16_t>(65535 - 4099 * y - 7 * x);
      rgb.at<cv::Vec3w>(y, x) = cv::Vec3w(static_cast<std::uint16_t>(1000 * x + y), static_cast<std::uint16_t>(300 + y),
                                          static_cast<std::uint16_t>(60000 - x));
    }
  }
  const Decoder keep({.other_formats = opencv_codec(DecodeColor::keep), .color = DecodeColor::keep});
  for (const cv::Mat& values : {grey, rgb}) {
    cv::Mat stored;  // imencode takes BGR
    if (values.channels() == 3) {
      cv::cvtColor(values, stored, cv::COLOR_RGB2BGR);
    } else {
      stored = values;
    }
    std::vector<uchar> png;
    ASSERT_TRUE(cv::imencode(".png", stored, png));
    std::vector<std::byte> bytes(png.size());
    std::memcpy(bytes.data(), png.data(), png.size());
    const Sample sample = make_sample(bytes, "scan.png");
    const Image whole = keep.decode(sample);
    ASSERT_EQ(whole.pixels.type(), values.type());
    EXPECT_EQ(cv::norm(whole.pixels, values, cv::NORM_INF), 0.0);
    const cv::Rect crop(3, 2, 6, 5);
    const Image part = keep.decode(sample, Region{crop, crop.size()});
    ASSERT_EQ(part.pixels.type(), values.type());
    EXPECT_EQ(cv::norm(part.pixels, values(crop), cv::NORM_INF), 0.0);
    // The default codec still makes 8-bit RGB of it.
    const Image eight = Decoder({.other_formats = opencv_codec()}).decode(sample);
    EXPECT_EQ(eight.pixels.type(), CV_8UC3);
  }
}

}  // namespace
}  // namespace stoke::nodes
