// Decoder: formats, colour spaces, EXIF orientation, probe, limits, strictness, raw samples and
// the hand-off to other_formats. Fused decode-and-crop: decode_fused_test.cpp; damaged input:
// bad_input_test.cpp.
#include "stoke/nodes/decode.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <opencv2/core.hpp>
#include <string>
#include <thread>
#include <vector>

#include "decode_test_support.hpp"
#include "stoke/nodes/decode_augment.hpp"
#include "stoke/nodes/random_horizontal_flip.hpp"
#include "stoke/nodes/random_resized_crop.hpp"

namespace stoke::nodes {
namespace {

using test::make_sample;
using test::max_channel_mad;
using test::psnr;
using test::test_picture;

// The bytes of a string literal, embedded NULs included, the terminating one not.
template <std::size_t N>
std::vector<std::byte> bytes_of(const char (&text)[N]) {
  std::vector<std::byte> out;
  for (std::size_t i = 0; i + 1 < N; ++i) out.push_back(static_cast<std::byte>(text[i]));
  return out;
}

std::vector<std::byte> fixture(const std::string& file) {
  return read_file(std::string(STOKE_TEST_DATA_DIR) + "/" + file);
}

// ---- formats ----------------------------------------------------------------------------------

TEST(DetectFormat, TellsFormatsFromMagicBytes) {
  EXPECT_EQ(detect_format(encode_jpeg(test_picture(16, 16))), ImageFormat::jpeg);
  EXPECT_EQ(detect_format(fixture("decode_tiny.png")), ImageFormat::png);
  EXPECT_EQ(detect_format(fixture("decode_tiny.gif")), ImageFormat::gif);
  EXPECT_EQ(detect_format(bytes_of("BM\x3a\0\0\0\0\0\0\0\x36\0\0\0\x28\0")), ImageFormat::bmp);
  EXPECT_EQ(detect_format(bytes_of("RIFF\x10\0\0\0WEBPVP8 ")), ImageFormat::webp);
  EXPECT_EQ(detect_format(bytes_of("II*\0\x08\0\0\0")), ImageFormat::tiff);
  EXPECT_EQ(detect_format(bytes_of("MM\0*\0\0\0\x08")), ImageFormat::tiff);
  EXPECT_EQ(detect_format(bytes_of("P6\n3 2\n255\n")), ImageFormat::pnm);
  EXPECT_EQ(detect_format(bytes_of("P5 3 2 255 ")), ImageFormat::pnm);
}

TEST(DetectFormat, UnknownForTextEmptyAndNearMisses) {
  EXPECT_EQ(detect_format({}), ImageFormat::unknown);
  EXPECT_EQ(detect_format(bytes_of("hello, world")), ImageFormat::unknown);
  EXPECT_EQ(detect_format(bytes_of("\xFF\xD8")), ImageFormat::unknown);  // too short for JPEG's magic
  EXPECT_EQ(detect_format(bytes_of("PA not pnm")), ImageFormat::unknown);
  EXPECT_EQ(detect_format(bytes_of("P6x")), ImageFormat::unknown);  // no whitespace after the magic
  EXPECT_EQ(detect_format(bytes_of("RIFF\x10\0\0\0WAVEfmt ")), ImageFormat::unknown);
}

TEST(FormatName, NamesEveryFormat) {
  EXPECT_EQ(format_name(ImageFormat::jpeg), "JPEG");
  EXPECT_EQ(format_name(ImageFormat::png), "PNG");
  EXPECT_EQ(format_name(ImageFormat::bmp), "BMP");
  EXPECT_EQ(format_name(ImageFormat::gif), "GIF");
  EXPECT_EQ(format_name(ImageFormat::webp), "WebP");
  EXPECT_EQ(format_name(ImageFormat::tiff), "TIFF");
  EXPECT_EQ(format_name(ImageFormat::pnm), "PNM");
  EXPECT_EQ(format_name(ImageFormat::unknown), "unknown");
}

TEST(DecodeError, MessageIsNameColonReason) {
  const DecodeError error("cats/1.jpg", "JPEG: broken");
  EXPECT_STREQ(error.what(), "cats/1.jpg: JPEG: broken");
  EXPECT_EQ(error.name(), "cats/1.jpg");
  EXPECT_EQ(error.reason(), "JPEG: broken");
}

// ---- JPEG colour spaces ------------------------------------------------------------------------

TEST(Decode, RgbJpegRoundTripsWithIdentity) {
  const cv::Mat source = test_picture(97, 61);  // odd sizes: partial MCUs
  Sample sample = make_sample(encode_jpeg(source, 95), "pics/a.jpg", 42);
  sample.label = 7;
  sample.epoch = 3;
  const Image image = Decoder().decode(sample);
  ASSERT_EQ(image.pixels.type(), CV_8UC3);
  ASSERT_EQ(image.pixels.size(), source.size());
  EXPECT_EQ(image.layout, PixelLayout::hwc);
  EXPECT_LT(max_channel_mad(image.pixels, source), 3.0);
  EXPECT_EQ(image.label, 7);
  EXPECT_EQ(image.index, 42u);
  EXPECT_EQ(image.epoch, 3u);
  EXPECT_EQ(image.name, "pics/a.jpg");
}

TEST(Decode, ChannelsComeOutInRgbOrder) {
  const cv::Mat red(16, 16, CV_8UC3, cv::Scalar(255, 0, 0));  // R, G, B
  const cv::Mat decoded = Decoder().decode(make_sample(encode_jpeg(red, 95), "red.jpg")).pixels;
  const cv::Scalar mean = cv::mean(decoded);
  EXPECT_GT(mean[0], 240);
  EXPECT_LT(mean[1], 15);
  EXPECT_LT(mean[2], 15);
}

TEST(Decode, GrayscaleJpegBecomesThreeEqualChannels) {
  cv::Mat gray;
  cv::extractChannel(test_picture(40, 30), gray, 1);
  const Sample sample = make_sample(encode_jpeg(gray, 95), "gray.jpg");
  const cv::Mat decoded = Decoder().decode(sample).pixels;
  ASSERT_EQ(decoded.type(), CV_8UC3);
  std::vector<cv::Mat> channels;
  cv::split(decoded, channels);
  EXPECT_EQ(cv::norm(channels[0], channels[1], cv::NORM_INF), 0);
  EXPECT_EQ(cv::norm(channels[0], channels[2], cv::NORM_INF), 0);
  cv::Mat diff;
  cv::absdiff(channels[0], gray, diff);
  EXPECT_LT(cv::mean(diff)[0], 2.0);
  EXPECT_EQ(Decoder().probe(sample).components, 1);
}

struct CmykCase {
  const char* name;
  J_COLOR_SPACE space;
  bool adobe;  // Adobe APP14 marker and inverted samples, as Photoshop writes them
};

class DecodeCmyk : public ::testing::TestWithParam<CmykCase> {};

TEST_P(DecodeCmyk, ConvertsToTheRgbItWasMadeFrom) {
  const CmykCase c = GetParam();
  const cv::Mat rgb = test_picture(48, 40);
  const std::vector<std::byte> jpeg = test::encode_cmyk(test::rgb_to_cmyk(rgb, c.adobe), c.space, c.adobe);
  const Sample sample = make_sample(jpeg, std::string(c.name) + ".jpg");
  const cv::Mat decoded = Decoder().decode(sample).pixels;
  ASSERT_EQ(decoded.type(), CV_8UC3);
  ASSERT_EQ(decoded.size(), rgb.size());
  // A wrong ink convention (inverted or not) would be off by ~100 grey levels.
  EXPECT_LT(max_channel_mad(decoded, rgb), 4.0) << c.name;
  EXPECT_EQ(Decoder().probe(sample).components, 4);
}

INSTANTIATE_TEST_SUITE_P(ColourSpaces, DecodeCmyk,
                         ::testing::Values(CmykCase{"cmyk_adobe", JCS_CMYK, true},
                                           CmykCase{"ycck_adobe", JCS_YCCK, true},
                                           CmykCase{"cmyk_plain", JCS_CMYK, false}),
                         [](const auto& p) { return std::string(p.param.name); });

TEST(Decode, ProgressiveAndBaselineOfOnePhotoAgree) {
  STOKE_SKIP_WITHOUT_PHOTOS();
  const std::string dir = STOKE_TEST_PHOTOS_DIR;
  const Decoder decoder;
  const Sample baseline = make_sample(read_file(dir + "/tower.jpg"), "tower.jpg");
  const Sample progressive = make_sample(read_file(dir + "/tower_progressive.jpg"), "tower_progressive.jpg");
  const ImageInfo info = decoder.probe(progressive);
  EXPECT_TRUE(info.progressive);
  EXPECT_FALSE(decoder.probe(baseline).progressive);
  const cv::Mat a = decoder.decode(baseline).pixels;
  const cv::Mat b = decoder.decode(progressive).pixels;
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(b.cols, info.width);
  // The same picture re-encoded: measured 0.0 / inf dB (the coefficients are identical); allow
  // for an encoder that re-quantized.
  EXPECT_LT(max_channel_mad(a, b), 1.0);
  EXPECT_GT(psnr(a, b), 40.0);
}

TEST(Decode, ProgressiveWithTooManyScansIsRefused) {
  // A valid progressive grayscale JPEG with one DC scan and, per AC coefficient, a first scan at
  // Al = 9 plus nine refinement scans: 631 scans, over the limit of 500.
  cv::Mat gray(16, 16, CV_8UC1);
  cv::randu(gray, 0, 255);
  std::vector<jpeg_scan_info> scans;
  scans.push_back({1, {0, 0, 0, 0}, 0, 0, 0, 0});
  for (int k = 1; k < 64; ++k) {
    scans.push_back({1, {0, 0, 0, 0}, k, k, 0, 9});
    for (int al = 8; al >= 0; --al) scans.push_back({1, {0, 0, 0, 0}, k, k, al + 1, al});
  }
  jpeg_compress_struct info{};
  jpeg_error_mgr errors{};
  info.err = jpeg_std_error(&errors);
  jpeg_create_compress(&info);
  unsigned char* out = nullptr;
  unsigned long out_size = 0;  // NOLINT(google-runtime-int): libjpeg's type
  jpeg_mem_dest(&info, &out, &out_size);
  info.image_width = 16;
  info.image_height = 16;
  info.input_components = 1;
  info.in_color_space = JCS_GRAYSCALE;
  jpeg_set_defaults(&info);
  info.scan_info = scans.data();
  info.num_scans = static_cast<int>(scans.size());
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < info.image_height) {
    JSAMPROW row = gray.ptr<unsigned char>(static_cast<int>(info.next_scanline));
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  jpeg_destroy_compress(&info);
  std::vector<std::byte> jpeg(reinterpret_cast<std::byte*>(out), reinterpret_cast<std::byte*>(out) + out_size);
  std::free(out);

  const Sample sample = make_sample(jpeg, "many_scans.jpg");
  EXPECT_TRUE(Decoder().probe(sample).progressive);  // the header alone is fine
  try {
    Decoder().decode(sample);
    FAIL() << "expected a DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("many_scans.jpg: JPEG: progressive image with more than 500 scans"),
              std::string::npos)
        << e.what();
  }
}

// ---- probe ---------------------------------------------------------------------------------------

TEST(Probe, ReadsTheHeaderOnly) {
  const std::vector<std::byte> jpeg = encode_jpeg(test_picture(123, 45), 90);
  // Cut right after the scan header: the pixels are gone, the header is intact.
  const std::size_t sos = test::find_marker(jpeg, 0xDA);
  const std::size_t sos_length =
      std::to_integer<std::size_t>(jpeg[sos + 2]) << 8 | std::to_integer<std::size_t>(jpeg[sos + 3]);
  const Sample cut =
      make_sample({jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(sos + 2 + sos_length)}, "cut.jpg");
  const ImageInfo info = Decoder().probe(cut);
  EXPECT_EQ(info.format, ImageFormat::jpeg);
  EXPECT_EQ(info.width, 123);
  EXPECT_EQ(info.height, 45);
  EXPECT_EQ(info.components, 3);
  EXPECT_EQ(info.orientation, 1);
  EXPECT_FALSE(info.progressive);
  EXPECT_THROW(Decoder().decode(cut), DecodeError);
}

TEST(Probe, RawSamplesReportTheirSize) {
  Sample sample = make_sample(std::vector<std::byte>(5 * 4 * 3), "cifar#3");
  sample.encoding = Encoding::raw_rgb;
  sample.width = 5;
  sample.height = 4;
  const ImageInfo info = Decoder().probe(sample);
  EXPECT_EQ(info.width, 5);
  EXPECT_EQ(info.height, 4);
  EXPECT_EQ(info.components, 3);
}

// ---- EXIF orientation ---------------------------------------------------------------------------

// Where pixel (x, y) of the upright image lives in the stored W x H image, per EXIF 2.32.
cv::Point stored_position(int orientation, int x, int y, int W, int H) {
  switch (orientation) {
    case 1:
      return {x, y};
    case 2:
      return {W - 1 - x, y};  // mirrored
    case 3:
      return {W - 1 - x, H - 1 - y};  // rotated 180
    case 4:
      return {x, H - 1 - y};  // flipped vertically
    case 5:
      return {y, x};  // transposed
    case 6:
      return {y, H - 1 - x};  // needs 90 degrees clockwise
    case 7:
      return {W - 1 - y, H - 1 - x};  // transversed
    default:
      return {W - 1 - y, x};  // 8: needs 90 degrees counter-clockwise
  }
}

class ExifOrientation : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(ExifOrientation, UprightsTheImage) {
  const auto [orientation, little] = GetParam();
  const int W = 40;
  const int H = 24;
  const std::vector<std::byte> plain = encode_jpeg(test_picture(W, H), 95);
  const Sample sample = make_sample(test::with_exif_orientation(plain, orientation, little), "exif.jpg");
  const cv::Mat stored = Decoder().decode(sample).pixels;  // exif_orientation off: ignored
  ASSERT_EQ(stored.size(), cv::Size(W, H));
  EXPECT_EQ(cv::norm(stored, Decoder().decode(make_sample(plain, "plain.jpg")).pixels, cv::NORM_INF), 0);

  const Decoder decoder({.exif_orientation = true});
  const ImageInfo info = decoder.probe(sample);
  const bool swapped = orientation >= 5;
  EXPECT_EQ(info.orientation, orientation);
  EXPECT_EQ(info.width, swapped ? H : W);
  EXPECT_EQ(info.height, swapped ? W : H);
  const cv::Mat upright = decoder.decode(sample).pixels;
  ASSERT_EQ(upright.size(), cv::Size(info.width, info.height));
  for (int y = 0; y < upright.rows; ++y) {
    for (int x = 0; x < upright.cols; ++x) {
      const cv::Point p = stored_position(orientation, x, y, W, H);
      ASSERT_EQ(upright.at<cv::Vec3b>(y, x), stored.at<cv::Vec3b>(p))
          << "orientation " << orientation << " at " << x << "," << y;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllEight, ExifOrientation, ::testing::Combine(::testing::Range(1, 9), ::testing::Bool()),
                         [](const auto& p) {
                           return "o" + std::to_string(std::get<0>(p.param)) +
                                  (std::get<1>(p.param) ? "_little" : "_big");
                         });

TEST(ExifOrientationTag, RotationsPutTheTopLeftCornerWhereExpected) {
  // Independently of stored_position: a stored image that is red in its top-left quadrant and
  // dark elsewhere. Orientation 6 (display needs 90 degrees clockwise) moves that corner to the
  // top right; 8 moves it to the bottom left; 3 to the bottom right.
  cv::Mat stored(32, 48, CV_8UC3, cv::Scalar(20, 20, 20));
  stored(cv::Rect(0, 0, 24, 16)).setTo(cv::Scalar(230, 20, 20));
  const std::vector<std::byte> jpeg = encode_jpeg(stored, 95);
  const Decoder decoder({.exif_orientation = true});
  const auto red_at = [&](int orientation, double fx, double fy) {
    const cv::Mat up = decoder.decode(make_sample(test::with_exif_orientation(jpeg, orientation), "q.jpg")).pixels;
    const cv::Vec3b p = up.at<cv::Vec3b>(static_cast<int>(fy * up.rows), static_cast<int>(fx * up.cols));
    return p[0] > 150;
  };
  EXPECT_TRUE(red_at(6, 0.9, 0.1));
  EXPECT_FALSE(red_at(6, 0.1, 0.1));
  EXPECT_TRUE(red_at(8, 0.1, 0.9));
  EXPECT_TRUE(red_at(3, 0.9, 0.9));
  EXPECT_TRUE(red_at(2, 0.9, 0.1));
  EXPECT_TRUE(red_at(1, 0.1, 0.1));
}

TEST(ExifOrientationTag, InvalidOrMalformedExifIsIgnored) {
  const std::vector<std::byte> plain = encode_jpeg(test_picture(20, 10), 90);
  const Decoder decoder({.exif_orientation = true});
  // Orientation 9 does not exist.
  EXPECT_EQ(decoder.probe(make_sample(test::with_exif_orientation(plain, 9), "nine.jpg")).orientation, 1);
  // An Exif segment whose TIFF IFD offset points past its end.
  std::vector<std::byte> broken = test::with_exif_orientation(plain, 6);
  broken[2 + 4 + 6 + 4] = std::byte{0xF0};  // IFD0 offset, low byte (little-endian)
  const ImageInfo info = decoder.probe(make_sample(broken, "broken_exif.jpg"));
  EXPECT_EQ(info.orientation, 1);
  EXPECT_EQ(info.width, 20);
  EXPECT_EQ(decoder.decode(make_sample(broken, "broken_exif.jpg")).pixels.size(), cv::Size(20, 10));
}

// ---- limits and strictness -----------------------------------------------------------------------

TEST(DecompressionBomb, HugeFrameIsRefusedFromTheHeader) {
  const std::vector<std::byte> bomb = test::with_frame_size(encode_jpeg(test_picture(16, 16)), 65535, 65535);
  const Sample sample = make_sample(bomb, "bomb.jpg");
  for (const bool probe : {true, false}) {
    try {
      if (probe) {
        Decoder().probe(sample);
      } else {
        Decoder().decode(sample);
      }
      FAIL() << "expected a DecodeError";
    } catch (const DecodeError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("bomb.jpg: JPEG: 65535x65535 = 4294836225 pixels exceeds DecodeOptions::max_pixels"),
                std::string::npos)
          << what;
    }
  }
}

TEST(DecompressionBomb, LimitIsInclusive) {
  const Sample sample = make_sample(encode_jpeg(test_picture(30, 20)), "small.jpg");
  EXPECT_EQ(Decoder({.max_pixels = 600}).decode(sample).pixels.cols, 30);
  EXPECT_THROW(Decoder({.max_pixels = 599}).decode(sample), DecodeError);
  EXPECT_THROW(Decoder({.max_pixels = 599}).probe(sample), DecodeError);
  Sample raw = make_sample(std::vector<std::byte>(30 * 20 * 3), "raw#1");
  raw.encoding = Encoding::raw_rgb;
  raw.width = 30;
  raw.height = 20;
  EXPECT_THROW(Decoder({.max_pixels = 599}).decode(raw), DecodeError);
}

TEST(Strict, TruncatedJpegIsAnErrorOnlyWhenStrict) {
  const std::vector<std::byte> jpeg = encode_jpeg(test_picture(64, 64), 90);
  const Sample cut =
      make_sample({jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() * 2 / 3)}, "cut.jpg");
  try {
    Decoder().decode(cut);
    FAIL() << "expected a DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("cut.jpg: JPEG: Premature end of JPEG file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("strict = false"), std::string::npos) << e.what();
  }
  const cv::Mat lenient = Decoder({.strict = false}).decode(cut).pixels;
  EXPECT_EQ(lenient.size(), cv::Size(64, 64));
}

// ---- raw samples ---------------------------------------------------------------------------------

TEST(RawRgb, IsCopiedNotDecoded) {
  const cv::Mat source = test_picture(7, 5);
  std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(source.data),
                               reinterpret_cast<const std::byte*>(source.data) + source.total() * 3);
  Sample sample = make_sample(bytes, "cifar#9", 9);
  sample.encoding = Encoding::raw_rgb;
  sample.width = 7;
  sample.height = 5;
  Image image = Decoder().decode(sample);
  EXPECT_EQ(cv::norm(image.pixels, source, cv::NORM_INF), 0);
  EXPECT_EQ(image.index, 9u);
  // The Image owns its pixels: writing them leaves the sample's bytes alone.
  image.pixels.setTo(cv::Scalar(0, 0, 0));
  EXPECT_EQ(sample.bytes.span()[0], bytes[0]);
  EXPECT_NE(cv::norm(image.pixels, source, cv::NORM_INF), 0);
}

TEST(RawRgb, WrongSizeIsADecodeError) {
  Sample sample = make_sample(std::vector<std::byte>(10), "cifar#1");
  sample.encoding = Encoding::raw_rgb;
  sample.width = 2;
  sample.height = 2;
  try {
    Decoder().decode(sample);
    FAIL() << "expected a DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_EQ(std::string(e.what()), "cifar#1: raw RGB: 10 bytes for a 2x2 image, expected width * height * 3 = 12");
  }
}

// ---- other formats -------------------------------------------------------------------------------

TEST(OtherFormats, WithoutADecoderNonJpegSaysHowToGetOne) {
  try {
    Decoder().decode(make_sample(fixture("decode_tiny.png"), "shots/p.jpg"));
    FAIL() << "expected a DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "shots/p.jpg: PNG: this build decodes JPEG only; build with OpenCV imgcodecs (stoke::imgcodecs)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Decoder().probe(make_sample(fixture("decode_tiny.gif"), "g.gif")), DecodeError);
}

TEST(OtherFormats, DecoderIsCalledAndItsResultChecked) {
  std::atomic<int> calls = 0;
  DecodeOptions options;
  options.other_formats = [&](std::span<const std::byte> bytes, const std::string& name) {
    ++calls;
    EXPECT_EQ(detect_format(bytes), ImageFormat::png);
    EXPECT_EQ(name, "p.png");
    return cv::Mat(6, 8, CV_8UC3, cv::Scalar(1, 2, 3));
  };
  const Decoder decoder(options);
  const Sample png = make_sample(fixture("decode_tiny.png"), "p.png");
  const ImageInfo info = decoder.probe(png);  // from the IHDR chunk, without decoding
  EXPECT_EQ(info.format, ImageFormat::png);
  EXPECT_EQ(info.width, 8);
  EXPECT_EQ(info.height, 6);
  EXPECT_EQ(calls, 0);
  const Image image = decoder.decode(png);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(image.pixels.size(), cv::Size(8, 6));
  // Region decoding of other formats: decode, crop, resize.
  EXPECT_EQ(decoder.decode(png, Region{cv::Rect(2, 1, 4, 4), cv::Size(3, 5)}).pixels.size(), cv::Size(3, 5));
}

TEST(OtherFormats, BadResultsAndExceptionsBecomeDecodeErrors) {
  const Sample png = make_sample(fixture("decode_tiny.png"), "p.png");
  DecodeOptions other_size;  // the header says 8x6
  other_size.other_formats = [](std::span<const std::byte>, const std::string&) { return cv::Mat(7, 5, CV_8UC3); };
  try {
    Decoder(other_size).decode(png);
    FAIL() << "expected a DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_EQ(std::string(e.what()), "p.png: PNG: the header says 8x6 but the image decoded to 5x7");
  }
  DecodeOptions floats;  // float values have no 8-bit RGB (grey, alpha and 16 bits are converted)
  floats.other_formats = [](std::span<const std::byte>, const std::string&) { return cv::Mat(6, 8, CV_32FC1); };
  EXPECT_THROW(Decoder(floats).decode(png), DecodeError);
  DecodeOptions gray;
  gray.other_formats = [](std::span<const std::byte>, const std::string&) {
    return cv::Mat(6, 8, CV_8UC1, cv::Scalar(9));
  };
  EXPECT_EQ(Decoder(gray).decode(png).pixels.at<cv::Vec3b>(2, 3), cv::Vec3b(9, 9, 9));
  DecodeOptions throwing;
  throwing.other_formats = [](std::span<const std::byte>, const std::string&) -> cv::Mat {
    throw std::runtime_error("libpng said no");
  };
  try {
    Decoder(throwing).decode(png);
    FAIL() << "expected a DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_EQ(std::string(e.what()), "p.png: PNG: libpng said no");
  }
}

TEST(OtherFormats, HeaderSizeIsCheckedBeforeTheDecoderRuns) {
  std::vector<std::byte> png = fixture("decode_tiny.png");
  for (const std::size_t at : {16, 20}) {  // IHDR width and height: 100000 each
    png[at] = std::byte{0}, png[at + 1] = std::byte{0x01}, png[at + 2] = std::byte{0x86}, png[at + 3] = std::byte{0xA0};
  }
  std::atomic<int> calls = 0;
  DecodeOptions options;
  options.other_formats = [&](std::span<const std::byte>, const std::string&) {
    ++calls;
    return cv::Mat(1, 1, CV_8UC3);
  };
  try {
    Decoder(options).decode(make_sample(png, "huge.png"));
    FAIL() << "expected a DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("huge.png: PNG: 100000x100000 = 10000000000 pixels exceeds"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(calls, 0);
}

// ---- threads -------------------------------------------------------------------------------------

TEST(Decoder, OneDecoderServesManyThreads) {
  STOKE_SKIP_WITHOUT_PHOTOS();
  const std::string dir = STOKE_TEST_PHOTOS_DIR;
  const Sample sample = make_sample(read_file(dir + "/tesla.jpg"), "tesla.jpg");
  const Decoder decoder;
  const cv::Mat expected = decoder.decode(sample).pixels;
  const Region region{cv::Rect(100, 50, 300, 200), cv::Size(96, 64)};
  const cv::Mat expected_region = decoder.decode(sample, region).pixels;
  std::atomic<int> mismatches = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 8; ++i) {
        if (cv::norm(decoder.decode(sample).pixels, expected, cv::NORM_INF) != 0) ++mismatches;
        if (cv::norm(decoder.decode(sample, region).pixels, expected_region, cv::NORM_INF) != 0) ++mismatches;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace stoke::nodes

namespace stoke::nodes {
namespace {

// ---- DecodeColor::keep: what the file holds

std::vector<std::byte> dicom_magic(const char* tag) {
  std::vector<std::byte> bytes(128, std::byte{0});
  for (const char* c = tag; *c != '\0'; ++c) bytes.push_back(static_cast<std::byte>(*c));
  bytes.resize(200, std::byte{0});
  return bytes;
}

TEST(DetectFormat, DicomByTheMagicAfterItsPreamble) {
  EXPECT_EQ(detect_format(dicom_magic("DICM")), ImageFormat::dicom);
  EXPECT_EQ(detect_format(dicom_magic("DICX")), ImageFormat::unknown);
  EXPECT_EQ(format_name(ImageFormat::dicom), "DICOM");
  // Without a DICOM decoder the error says how to get one.
  try {
    Decoder().decode(make_sample(dicom_magic("DICM"), "ct/1.dcm"));
    FAIL() << "no exception";
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("dicom_codec()"), std::string::npos) << e.what();
  }
}

// A grayscale JPEG of a diagonal ramp with some texture.
std::vector<std::byte> grey_jpeg(int width, int height) {
  cv::Mat grey(height, width, CV_8UC1);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) grey.at<std::uint8_t>(y, x) = static_cast<std::uint8_t>((3 * x + 5 * y + x * y % 7) % 256);
  return encode_jpeg(grey);
}

TEST(DecodeKeep, AGreyJpegIsOneChannelEqualToTheRgbDecodesEveryChannel) {
  const Sample sample = make_sample(grey_jpeg(160, 120), "grey.jpg");
  const Decoder rgb;
  const Decoder keep({.color = DecodeColor::keep});
  EXPECT_EQ(keep.probe(sample).components, 1);
  const Image whole_rgb = rgb.decode(sample);
  const Image whole = keep.decode(sample);
  ASSERT_EQ(whole_rgb.pixels.type(), CV_8UC3);
  ASSERT_EQ(whole.pixels.type(), CV_8UC1);
  std::vector<cv::Mat> planes;
  cv::split(whole_rgb.pixels, planes);
  for (const cv::Mat& plane : planes) EXPECT_EQ(cv::norm(plane, whole.pixels, cv::NORM_INF), 0.0);
  // The fused path at every DCT scale it picks (1, 1/2, 1/4, 1/8), and a crop too thin for it.
  for (const Region region : {Region{cv::Rect(10, 8, 100, 90), cv::Size(90, 80)},
                              Region{cv::Rect(0, 0, 160, 120), cv::Size(70, 50)},
                              Region{cv::Rect(20, 10, 120, 100), cv::Size(30, 25)},
                              Region{cv::Rect(5, 5, 150, 110), cv::Size(18, 13)},
                              Region{cv::Rect(3, 40, 150, 4), cv::Size(20, 20)}}) {
    const Image a = rgb.decode(sample, region);
    const Image b = keep.decode(sample, region);
    ASSERT_EQ(b.pixels.type(), CV_8UC1);
    cv::Mat first;
    cv::extractChannel(a.pixels, first, 0);
    EXPECT_EQ(cv::norm(first, b.pixels, cv::NORM_INF), 0.0) << region.crop << " -> " << region.out;
  }
}

TEST(DecodeKeep, AColourJpegIsTheSameRgbEitherWay) {
  const Sample sample = make_sample(encode_jpeg(test_picture(64, 48)), "colour.jpg");
  const Image a = Decoder().decode(sample);
  const Image b = Decoder({.color = DecodeColor::keep}).decode(sample);
  ASSERT_EQ(b.pixels.type(), CV_8UC3);
  EXPECT_EQ(cv::norm(a.pixels, b.pixels, cv::NORM_INF), 0.0);
}

// A stand-in for a 16-bit codec: a PNG signature names the format; the "decoder" returns a known
// uint16 (or int16) ramp.
cv::Mat ramp16(int type) {
  cv::Mat m(6, 8, type);
  for (int y = 0; y < m.rows; ++y)
    for (int x = 0; x < m.cols; ++x) {
      if (type == CV_16UC1) m.at<std::uint16_t>(y, x) = static_cast<std::uint16_t>(40000 + 1000 * y + 17 * x);
      else m.at<std::int16_t>(y, x) = static_cast<std::int16_t>(-1024 + 300 * y - 41 * x);
    }
  return m;
}

TEST(DecodeKeep, OtherFormatsComeAsTheirDecoderReturnsThemAndCropsWithoutResamplingAreExact) {
  for (const int type : {CV_16UC1, CV_16SC1}) {
    const cv::Mat values = ramp16(type);
    const OtherFormatDecoder codec = [values](std::span<const std::byte>, const std::string&) { return values.clone(); };
    const Sample sample = make_sample(bytes_of("\x89PNG\r\n\x1a\n not really a png"), "scan.png");
    // The default makes 8-bit RGB of unsigned 16-bit grey (the high byte, expanded); signed
    // values have none, and the error names the way out.
    if (type == CV_16UC1) {
      const Image rgb = Decoder({.other_formats = codec}).decode(sample);
      ASSERT_EQ(rgb.pixels.type(), CV_8UC3);
      EXPECT_EQ(rgb.pixels.at<cv::Vec3b>(5, 7), cv::Vec3b::all(static_cast<std::uint8_t>((40000 + 5000 + 7 * 17) / 256)));
    } else {
      try {
        Decoder({.other_formats = codec}).decode(sample);
        FAIL() << "int16 values came back as RGB";
      } catch (const DecodeError& e) {
        EXPECT_NE(std::string(e.what()).find("DecodeColor::keep"), std::string::npos) << e.what();
      }
    }
    const Decoder keep({.other_formats = codec, .color = DecodeColor::keep});
    const Image whole = keep.decode(sample);
    ASSERT_EQ(whole.pixels.type(), type);
    EXPECT_EQ(cv::norm(whole.pixels, values, cv::NORM_INF), 0.0);
    const Image crop = keep.decode(sample, Region{cv::Rect(2, 1, 5, 4), cv::Size(5, 4)});
    ASSERT_EQ(crop.pixels.type(), type);
    EXPECT_EQ(cv::norm(crop.pixels, values(cv::Rect(2, 1, 5, 4)), cv::NORM_INF), 0.0);
  }
}


// ---- masks beside the image (Sample::mask)

constexpr int kW = 64;
constexpr int kH = 48;

// y * kW + x at (x, y): every cell says where it is.
cv::Mat where_map(int type) {
  cv::Mat m(kH, kW, type);
  for (int y = 0; y < kH; ++y)
    for (int x = 0; x < kW; ++x) {
      if (type == CV_16UC1) m.at<std::uint16_t>(y, x) = static_cast<std::uint16_t>(y * kW + x);
      else m.at<std::int32_t>(y, x) = y * kW + x;
    }
  return m;
}

// A stand-in for a PNG codec: "IMAGE" files decode to `image`, "MASK" files to `mask`.
OtherFormatDecoder fake_png(cv::Mat image, cv::Mat mask) {
  return [image, mask](std::span<const std::byte> bytes, const std::string&) {
    const bool is_mask = bytes.size() > 8 && static_cast<char>(bytes[8]) == 'M';
    return (is_mask ? mask : image).clone();
  };
}

Sample with_mask(Sample sample, const std::string& mask_name) {
  sample.mask = Bytes(bytes_of("\x89PNG\r\n\x1a\nMASK"));
  sample.mask_name = mask_name;
  return sample;
}

TEST(DecodeMask, TheMaskIsDecodedAndFollowsTheRegionByNearestNeighbour) {
  const Decoder keep({.other_formats = fake_png(where_map(CV_16UC1), where_map(CV_16UC1)), .color = DecodeColor::keep});
  Sample sample = with_mask(make_sample(bytes_of("\x89PNG\r\n\x1a\nIMAGE"), "scan.png"), "scan_mask.png");
  sample.targets["age"] = Target{.shape = {1}, .values = {42.0f}};
  const Image whole = keep.decode(sample);
  ASSERT_EQ(whole.mask.type(), CV_16UC1);
  EXPECT_EQ(cv::norm(whole.mask, where_map(CV_16UC1), cv::NORM_INF), 0.0);
  EXPECT_EQ(whole.targets.at("age").values, std::vector<float>{42.0f});

  const Region region{cv::Rect(10, 6, 40, 30), cv::Size(20, 15)};
  const Image part = keep.decode(sample, region);
  ASSERT_EQ(part.mask.size(), region.out);
  for (int y = 0; y < region.out.height; ++y) {
    for (int x = 0; x < region.out.width; ++x) {
      // Nearest neighbour: the mask's source cell is within half a cell of where the output
      // cell's centre falls in the crop (pixel centres at integers).
      const double px = region.crop.x + (x + 0.5) * region.crop.width / region.out.width - 0.5;
      const double py = region.crop.y + (y + 0.5) * region.crop.height / region.out.height - 0.5;
      const int m = part.mask.at<std::uint16_t>(y, x);
      ASSERT_LE(std::abs(m % kW - px), 0.5) << "(" << x << ", " << y << ")";
      ASSERT_LE(std::abs(m / kW - py), 0.5) << "(" << x << ", " << y << ")";
      // The pixels, area-averaged over the same 2x2 cells, are within a row of it.
      EXPECT_LE(std::abs(part.pixels.at<std::uint16_t>(y, x) - m), kW) << "(" << x << ", " << y << ")";
    }
  }
}

TEST(DecodeMask, AMaskOfAnotherSizeOrOfColoursIsADecodeErrorNamingIt) {
  const Sample sample = with_mask(make_sample(bytes_of("\x89PNG\r\n\x1a\nIMAGE"), "a.png"), "a_mask.png");
  const cv::Mat image = where_map(CV_16UC1);
  try {
    Decoder({.other_formats = fake_png(image, cv::Mat(kH, kW + 1, CV_8UC1, cv::Scalar(1))), .color = DecodeColor::keep})
        .decode(sample);
    FAIL() << "no exception";
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.name(), "a_mask.png");
    EXPECT_NE(std::string(e.what()).find("65x48"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a.png is 64x48"), std::string::npos) << e.what();
  }
  // Three equal channels (a grey PNG read as colour) are one mask; different ones are not.
  cv::Mat grey_as_rgb(kH, kW, CV_8UC3, cv::Scalar(3, 3, 3));
  const Image ok = Decoder({.other_formats = fake_png(image, grey_as_rgb), .color = DecodeColor::keep}).decode(sample);
  EXPECT_EQ(ok.mask.type(), CV_8UC1);
  cv::Mat colours(kH, kW, CV_8UC3, cv::Scalar(3, 4, 3));
  EXPECT_THROW(Decoder({.other_formats = fake_png(image, colours), .color = DecodeColor::keep}).decode(sample),
               DecodeError);
}

// DecodeAugment's fused path (the JPEG decoded only in its crop) gives the mask the same crop as
// the unfused path's transforms do: random crop and flip, mask for mask identical.
TEST(DecodeMask, FusedAndUnfusedDecodeAugmentGiveTheSameMask) {
  const cv::Mat mask = [] {
    cv::Mat m(120, 160, CV_8UC1);
    for (int y = 0; y < 120; ++y)
      for (int x = 0; x < 160; ++x) m.at<std::uint8_t>(y, x) = static_cast<std::uint8_t>((x / 10 + 16 * (y / 10)) % 251);
    return m;
  }();
  const Decoder decoder({.other_formats = fake_png(cv::Mat(), mask)});
  const Augment augment({std::make_shared<RandomResizedCrop>(cv::Size(48, 40)), std::make_shared<RandomHorizontalFlip>(0.5)},
                        11);
  const DecodeAugment fused(decoder, augment, true);
  const DecodeAugment unfused(decoder, augment, false);
  for (std::uint64_t i = 0; i < 12; ++i) {
    const Sample sample = with_mask(make_sample(grey_jpeg(160, 120), "x.jpg", i), "x_mask.png");
    const Image a = fused(sample);
    const Image b = unfused(sample);
    ASSERT_EQ(a.mask.size(), cv::Size(48, 40));
    EXPECT_EQ(cv::norm(a.mask, b.mask, cv::NORM_INF), 0.0) << "item " << i;
    EXPECT_EQ(a.pixels.type(), CV_8UC3);
  }
}

}  // namespace
}  // namespace stoke::nodes
