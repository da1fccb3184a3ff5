// The input pipeline end to end (open_dataset -> read -> decode -> augment -> batch) on data beyond
// 8-bit RGB: one channel of uint16 kept bit for bit where nothing resamples, and five channels
// cropped, flipped and normalized per channel into float planes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <span>
#include <map>
#include <mutex>
#include <opencv2/imgcodecs.hpp>
#include <stoke/nodes/batch.hpp>
#include <stoke/nodes/image_folder.hpp>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"
#include "stoke/train/input.hpp"
#ifdef STOKE_TEST_DICOM_DIR
#include <stoke/nodes/dicom_codec.hpp>
#endif

namespace stoke::train {
namespace {

namespace fs = std::filesystem;
using nodes::test::TempDir;

/// Element (r, c, ch) of image `i`: spans the whole 16-bit range, distinct per position.
std::uint16_t value16(int i, int r, int c, int ch) {
  return static_cast<std::uint16_t>((i * 7919 + r * 977 + c * 131 + ch * 4099) * 37 % 65536);
}

/// Writes `count` images of `channels` x uint16 into dir/<class>/<i>.<extension>, 2 classes.
fs::path write_images(const fs::path& dir, int count, int channels, int width, int height, const char* extension) {
  for (int i = 0; i < count; ++i) {
    cv::Mat image(height, width, CV_MAKETYPE(CV_16U, channels));
    for (int r = 0; r < height; ++r)
      for (int c = 0; c < width; ++c)
        for (int ch = 0; ch < channels; ++ch) image.ptr<std::uint16_t>(r)[c * channels + ch] = value16(i, r, c, ch);
    const fs::path path = dir / (i % 2 ? "b" : "a") / (std::to_string(i) + extension);
    fs::create_directories(path.parent_path());
    if (!cv::imwrite(path.string(), image)) throw std::runtime_error("cannot write " + path.string());
  }
  return dir;
}

/// Runs the input pipeline over `dataset` once (no shuffle, decoding with DecodeColor::keep) and
/// hands each batch to `check`.
template <class Check>
std::size_t run_input(const nodes::DatasetPtr& dataset, InputConfig config, Check check,
                      std::vector<std::string>* skipped = nullptr) {
  config.shuffle = false;
  config.threads = 2;
  config.decode.color = nodes::DecodeColor::keep;
  Input input = make_input(dataset, config);
  graph::Pipeline pipe(input.pipeline_options);
  std::size_t items = 0;
  add_input(pipe, input, config).sink("check", [&](nodes::Batch batch) {
    items += batch.size();
    check(batch, *dataset);
  });
  const graph::RunReport report = pipe.run();
  for (const auto& item : report.skipped_items) {
    if (skipped)
      skipped->push_back(item.stage + ": " + item.reason);
    else
      ADD_FAILURE() << item.stage << ": " << item.reason;
  }
  return items;
}

TEST(Channels, SixteenBitGreyIsBatchedBitForBitWhereNothingResamples) {
  const TempDir dir;
  const fs::path data = write_images(dir / "grey", 6, 1, 20, 14, ".png");
  for (const bool fuse : {true, false}) {
    InputConfig config;
    config.batch_size = 4;
    config.size = 10;
    config.fuse = fuse;
    config.transforms = {"center_crop size=10"};  // torchvision's offsets: left 5, top 2
    config.decode = default_decode_options(nodes::DecodeColor::keep);
    std::size_t compared = 0;
    const std::size_t items = run_input(open_dataset(data), config, [&](const nodes::Batch& batch, const nodes::Dataset& dataset) {
      ASSERT_EQ(batch.shape().describe(), "4 x 10x10x1 nhwc u16");
      const auto pixels = batch.pixels_as<std::uint16_t>();
      for (std::size_t k = 0; k < batch.size(); ++k) {
        const int i = std::stoi(fs::path(dataset.name(batch.indices()[k])).stem().string());
        for (int r = 0; r < 10; ++r)
          for (int c = 0; c < 10; ++c)
            ASSERT_EQ(pixels[k * 100 + static_cast<std::size_t>(r * 10 + c)], value16(i, r + 2, c + 5, 0))
                << "image " << i << " at (" << r << ", " << c << "), fuse " << fuse;
        ++compared;
      }
    });
    EXPECT_EQ(items, 6u);
    EXPECT_EQ(compared, 6u);
  }
}

// Five bands of uint16 in PAM files (netpbm's P7, which stoke detects as PNM): OpenCV's codecs stop
// at 4 channels, so the test plugs its own reader in as DecodeOptions::other_formats, as a user with
// multispectral data would.
std::vector<std::byte> pam16(int i, int channels, int width, int height) {
  const std::string header = "P7\nWIDTH " + std::to_string(width) + "\nHEIGHT " + std::to_string(height) + "\nDEPTH " +
                             std::to_string(channels) + "\nMAXVAL 65535\nTUPLTYPE BANDS\nENDHDR\n";
  std::vector<std::byte> bytes(header.size());
  std::memcpy(bytes.data(), header.data(), header.size());
  for (int r = 0; r < height; ++r)
    for (int c = 0; c < width; ++c)
      for (int ch = 0; ch < channels; ++ch) {
        const std::uint16_t v = value16(i, r, c, ch);
        bytes.push_back(static_cast<std::byte>(v >> 8));  // PAM samples are big-endian
        bytes.push_back(static_cast<std::byte>(v & 0xff));
      }
  return bytes;
}

cv::Mat read_pam16(std::span<const std::byte> bytes, const std::string& name) {
  const std::string text(reinterpret_cast<const char*>(bytes.data()), std::min<std::size_t>(bytes.size(), 256));
  const std::size_t end = text.find("ENDHDR\n");
  if (end == std::string::npos) throw std::runtime_error(name + ": not a PAM file");
  std::map<std::string, int> fields;
  std::istringstream header(text.substr(3, end - 3));
  for (std::string key, value; header >> key >> value;) fields[key] = key == "TUPLTYPE" ? 0 : std::stoi(value);
  cv::Mat image(fields["HEIGHT"], fields["WIDTH"], CV_MAKETYPE(CV_16U, fields["DEPTH"]));
  const std::byte* data = bytes.data() + end + 7;
  for (std::size_t k = 0; k < image.total() * static_cast<std::size_t>(image.channels()); ++k)
    image.ptr<std::uint16_t>()[k] = static_cast<std::uint16_t>(std::to_integer<int>(data[2 * k]) << 8 |
                                                               std::to_integer<int>(data[2 * k + 1]));
  return image;
}

TEST(Channels, FiveChannelsAreCroppedFlippedAndNormalizedPerChannel) {
  const TempDir dir;
  for (int i = 0; i < 5; ++i) nodes::test::write_bytes(dir / "bands" / (i % 2 ? "b" : "a") / (std::to_string(i) + ".pam"), pam16(i, 5, 24, 18));
  InputConfig config;
  config.batch_size = 2;
  config.size = 8;
  config.transforms = {"random_resized_crop size=8", "random_horizontal_flip",
                       "normalize mean=0.5,0.5,0.5,0.5,0.5 std=0.25,0.25,0.25,0.25,0.25"};
  config.decode.other_formats = read_pam16;
  nodes::ImageFolderOptions folder;
  folder.extensions = {"pam"};
  const auto dataset = std::make_shared<nodes::ImageFolder>(dir / "bands", folder);
  std::size_t batches = 0;
  const std::size_t items = run_input(dataset, config, [&](const nodes::Batch& batch, const nodes::Dataset&) {
    ASSERT_EQ(batch.shape().describe(), "2 x 8x8x5 nchw f32");
    for (const float v : batch.f32()) {
      ASSERT_TRUE(std::isfinite(v));
      ASSERT_GE(v, -2.0f - 1e-5f);  // (0 - 0.5) / 0.25
      ASSERT_LE(v, 2.0f + 1e-5f);   // (1 - 0.5) / 0.25
    }
    ++batches;
  });
  EXPECT_EQ(items, 5u);
  EXPECT_EQ(batches, 3u);  // 2 + 2 + a final 1
  // Without the reader, the files are named as undecodable, not read as something else.
  config.decode.other_formats = nullptr;
  config.decode.color = nodes::DecodeColor::keep;
  EXPECT_THROW(batch_shape(*dataset, config, make_transforms(config)), std::runtime_error);
}

#ifdef STOKE_TEST_DICOM_DIR
// CT in Hounsfield units (int16) from DICOM: cropped without resampling and batched, the values are
// decode_dicom's, bit for bit; a truncated file is skipped and named, the others still batched.
TEST(Channels, SignedDicomIsBatchedBitForBitAndADamagedFileIsSkippedAndNamed) {
  const TempDir dir;
  const fs::path ct = fs::path(STOKE_TEST_DICOM_DIR) / "CT_small.dcm";
  fs::create_directories(dir / "scans" / "ct");
  for (int i = 0; i < 3; ++i) fs::copy_file(ct, dir / "scans" / "ct" / (std::to_string(i) + ".dcm"));
  fs::copy_file(fs::path(STOKE_TEST_DICOM_DIR) / "MR_truncated.dcm", dir / "scans" / "ct" / "truncated.dcm");
  const std::vector<std::byte> bytes = nodes::read_file(ct.string());
  const cv::Mat hu = nodes::decode_dicom(bytes, ct.string());
  ASSERT_EQ(hu.type(), CV_16SC1);
  InputConfig config;
  config.batch_size = 2;
  config.size = 64;
  config.transforms = {"center_crop size=64"};  // 128x128: left 32, top 32
  config.decode = default_decode_options(nodes::DecodeColor::keep);
  std::vector<std::string> skipped;
  std::size_t compared = 0;
  run_input(open_dataset(dir / "scans"), config, [&](const nodes::Batch& batch, const nodes::Dataset&) {
    ASSERT_EQ(batch.shape().describe(), "2 x 64x64x1 nhwc i16");
    const auto pixels = batch.pixels_as<std::int16_t>();
    for (std::size_t k = 0; k < batch.size(); ++k, ++compared)
      for (int r = 0; r < 64; ++r)
        for (int c = 0; c < 64; ++c)
          ASSERT_EQ(pixels[k * 64 * 64 + static_cast<std::size_t>(r * 64 + c)], hu.at<std::int16_t>(r + 32, c + 32));
  }, &skipped);
  EXPECT_EQ(compared, 3u);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_THAT(skipped[0], ::testing::HasSubstr("truncated.dcm"));
  EXPECT_THAT(skipped[0], ::testing::HasSubstr("truncated file"));
}
#endif

}  // namespace
}  // namespace stoke::train
