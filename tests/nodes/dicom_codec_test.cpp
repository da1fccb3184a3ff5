// stoke::dicom: DICOM through DCMTK, checked against pydicom's values for pydicom's own test files
// (tests/data/dicom: README.md says where each file comes from and what it is).
//
// Expected values were printed by tests/data/dicom/expected_values.py (Debian 12: pydicom 2.3.1,
// numpy 1.24, Pillow 9.4), run in that folder as `/usr/bin/python3 expected_values.py`; each test
// quotes the command for its own numbers. checksum() is the script's: sum(v[i] * (i % 1000 + 1))
// over the array in C order (row, column, channel).
#include "stoke/nodes/dicom_codec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <opencv2/core.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "stoke/nodes/jpeg_encode.hpp"

namespace stoke::nodes {
namespace {

using ByteVector = std::vector<std::byte>;

ByteVector read_fixture(const std::string& file) {
  const std::string path = std::string(STOKE_TEST_DICOM_DIR) + "/" + file;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ByteVector bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

cv::Mat decode(const std::string& file) { return decode_dicom(read_fixture(file), file); }

// The value at (row, col, channel) as a double, whatever the matrix's depth.
double at(const cv::Mat& m, int row, int col, int channel = 0) {
  const cv::Mat flat = m.reshape(1, m.rows);
  cv::Mat one;
  flat(cv::Rect(col * m.channels() + channel, row, 1, 1)).convertTo(one, CV_64F);
  return one.at<double>(0, 0);
}

// expected_values.py's checksum, over a continuous matrix; exact for integer matrices.
double checksum(const cv::Mat& m) {
  cv::Mat values;
  m.reshape(1, 1).convertTo(values, CV_64F);
  double total = 0;
  for (int i = 0; i < values.cols; ++i) total += values.at<double>(0, i) * static_cast<double>(i % 1000 + 1);
  return total;
}

double min_of(const cv::Mat& m) {
  double lo = 0;
  cv::minMaxLoc(m.reshape(1), &lo, nullptr);
  return lo;
}
double max_of(const cv::Mat& m) {
  double hi = 0;
  cv::minMaxLoc(m.reshape(1), nullptr, &hi);
  return hi;
}
double sum_of(const cv::Mat& m) {
  const cv::Scalar s = cv::sum(m);
  return s[0] + s[1] + s[2] + s[3];
}

bool identical(const cv::Mat& a, const cv::Mat& b) {
  return a.type() == b.type() && a.size() == b.size() && cv::norm(a, b, cv::NORM_INF) == 0;
}

// The offset of an explicit-VR little-endian element's tag (group, element, VR) in `bytes`.
std::size_t find_element(const ByteVector& bytes, std::uint16_t group, std::uint16_t element, const char* vr) {
  const std::byte pattern[6] = {std::byte(group & 0xFF), std::byte(group >> 8), std::byte(element & 0xFF),
                                std::byte(element >> 8), std::byte(vr[0]), std::byte(vr[1])};
  const auto it = std::search(bytes.begin() + 132, bytes.end(), std::begin(pattern), std::end(pattern));
  if (it == bytes.end()) throw std::runtime_error("element not found");
  return static_cast<std::size_t>(it - bytes.begin());
}

void put_u16(ByteVector& bytes, std::size_t at, std::uint16_t value) {
  bytes[at] = std::byte(value & 0xFF);
  bytes[at + 1] = std::byte(value >> 8);
}

// The DecodeError decode_dicom throws for `bytes`; fails the test when it throws nothing or another type.
std::string decode_error(const ByteVector& bytes, const std::string& name) {
  try {
    const cv::Mat m = decode_dicom(bytes, name);
    ADD_FAILURE() << name << ": decoded to a " << m.cols << "x" << m.rows << " image instead of throwing";
  } catch (const DecodeError& e) {
    EXPECT_EQ(e.name(), name);
    EXPECT_EQ(std::string(e.what()).rfind(name + ": DICOM: ", 0), 0U) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << name << ": threw " << typeid(e).name() << " (" << e.what() << "), not a DecodeError";
  }
  return {};
}

// ---- values against pydicom ------------------------------------------------------------------------

TEST(DicomCodec, CtSmallDecodesToPydicomsHounsfieldUnits) {
  // /usr/bin/python3 -c "import pydicom; from pydicom.pixel_data_handlers.util import apply_modality_lut as m;
  //   d = pydicom.dcmread('CT_small.dcm'); a = m(d.pixel_array, d); print(a.min(), a.max(), a.sum(),
  //   [a[r, c] for r, c in [(0,0), (0,127), (127,0), (127,127), (10,20), (20,10), (31,64), (64,31), (50,50),
  //   (63,63), (100,3), (3,100)]])"
  // -> -896.0 1167.0 -1950906.0 [-849, -808, -65, -115, -839, -690, 269, 388, 60, 819, 33, 160];
  // checksum -935967325 (expected_values.py). Stored values 128..2191, Rescale Intercept -1024.
  const cv::Mat hu = decode("CT_small.dcm");
  ASSERT_EQ(hu.type(), CV_16SC1) << "integer slope and intercept, results within int16";
  ASSERT_EQ(hu.size(), cv::Size(128, 128));
  EXPECT_EQ(min_of(hu), -896);
  EXPECT_EQ(max_of(hu), 1167);
  EXPECT_EQ(sum_of(hu), -1950906);
  EXPECT_EQ(checksum(hu), -935967325);
  const struct {
    int row, col;
    double hu;
  } pixels[] = {{0, 0, -849},   {0, 127, -808}, {127, 0, -65}, {127, 127, -115}, {10, 20, -839}, {20, 10, -690},
                {31, 64, 269},  {64, 31, 388},  {50, 50, 60},  {63, 63, 819},    {100, 3, 33},   {3, 100, 160}};
  for (const auto& p : pixels) EXPECT_EQ(at(hu, p.row, p.col), p.hu) << "(" << p.row << ", " << p.col << ")";
}

// /usr/bin/python3 -c "import pydicom; d = pydicom.dcmread('MR_small.dcm'); a = d.pixel_array;
//   print(a.dtype, a.min(), a.max(), a.sum(), [a[r, c] for r, c in [(0,0), (0,63), (63,0), (63,63), (10,20),
//   (20,10), (31,0), (0,31), (50,50), (36,3), (3,36)]])"
// -> int16 127 2145 2125338 [905, 328, 378, 862, 316, 228, 366, 422, 970, 277, 267]; checksum 1049784469.
// (No Rescale Slope/Intercept: apply_modality_lut returns pixel_array unchanged.)
void expect_mr_small_values(const cv::Mat& mr) {
  ASSERT_EQ(mr.type(), CV_16SC1);
  ASSERT_EQ(mr.size(), cv::Size(64, 64));
  EXPECT_EQ(min_of(mr), 127);
  EXPECT_EQ(max_of(mr), 2145);
  EXPECT_EQ(sum_of(mr), 2125338);
  EXPECT_EQ(checksum(mr), 1049784469);
  const struct {
    int row, col;
    double value;
  } pixels[] = {{0, 0, 905},    {0, 63, 328},   {63, 0, 378},  {63, 63, 862}, {10, 20, 316}, {20, 10, 228},
                {31, 0, 366},   {0, 31, 422},   {50, 50, 970}, {36, 3, 277},  {3, 36, 267}};
  for (const auto& p : pixels) EXPECT_EQ(at(mr, p.row, p.col), p.value) << "(" << p.row << ", " << p.col << ")";
}

TEST(DicomCodec, MrSmallDecodesToPydicomsValues) { expect_mr_small_values(decode("MR_small.dcm")); }

class DicomTransferSyntax : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(DicomTransferSyntax, MrSmallVariantDecodesToTheSameArray) {
  const auto [file, uid] = GetParam();
  const ByteVector bytes = read_fixture(file);
  EXPECT_EQ(probe_dicom(bytes, file).transfer_syntax, uid);
  const cv::Mat variant = decode_dicom(bytes, file);
  expect_mr_small_values(variant);
  EXPECT_TRUE(identical(variant, decode("MR_small.dcm")));
}

INSTANTIATE_TEST_SUITE_P(
    Lossless, DicomTransferSyntax,
    ::testing::Values(std::pair{"MR_small_implicit.dcm", "1.2.840.10008.1.2"},      // implicit VR little endian
                      std::pair{"MR_small_bigendian.dcm", "1.2.840.10008.1.2.2"},   // explicit VR big endian
                      std::pair{"MR_small_RLE.dcm", "1.2.840.10008.1.2.5"},         // RLE lossless
                      std::pair{"MR_small_jpeg_ls_lossless.dcm", "1.2.840.10008.1.2.4.80"}));  // JPEG-LS lossless

TEST(DicomCodec, BitsAboveBitsStoredAreMaskedAndBit11IsTheSign) {
  // MR_small_bits12.dcm (make_derived.py): Bits Stored 12, random garbage in bits 12..15. pydicom 2
  // does not mask, so expected_values.py masks and sign-extends pixel_array itself (as pydicom 3
  // does): min -2043 max 2046 sum 2104858 checksum 1036103829. MR_small's values above 2047 have
  // bit 11 set, so they become negative.
  const cv::Mat m = decode("MR_small_bits12.dcm");
  ASSERT_EQ(m.type(), CV_16SC1);
  EXPECT_EQ(min_of(m), -2043);
  EXPECT_EQ(max_of(m), 2046);
  EXPECT_EQ(sum_of(m), 2104858);
  EXPECT_EQ(checksum(m), 1036103829);
  const cv::Mat mr = decode("MR_small.dcm");
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 64; ++x) {
      const int v = mr.at<std::int16_t>(y, x) & 0xFFF;
      ASSERT_EQ(m.at<std::int16_t>(y, x), v >= 2048 ? v - 4096 : v) << x << "," << y;
    }
  }
}

TEST(DicomCodec, NonIntegerRescaleGivesFloats) {
  // MR_small_rescale.dcm: Rescale Slope 0.5, Intercept -3.25 (make_derived.py). expected_values.py:
  // apply_modality_lut -> float64, min 60.25 max 1069.25 sum 1049357.0 checksum 518370602.5,
  // (0, 0) 449.25, (0, 63) 160.75, (63, 0) 185.75 -- all exact in float.
  const cv::Mat m = decode("MR_small_rescale.dcm");
  ASSERT_EQ(m.type(), CV_32FC1);
  EXPECT_EQ(min_of(m), 60.25);
  EXPECT_EQ(max_of(m), 1069.25);
  EXPECT_EQ(sum_of(m), 1049357.0);
  EXPECT_EQ(checksum(m), 518370602.5);
  EXPECT_EQ(at(m, 0, 0), 449.25);
  EXPECT_EQ(at(m, 0, 63), 160.75);
  EXPECT_EQ(at(m, 63, 0), 185.75);
}

TEST(DicomCodec, ModalityLutSequenceMapsTheStoredValues) {
  // MR_small_modality_lut.dcm: LUT Descriptor (1800, 200, 16), entry i = 37 i mod 65536
  // (make_derived.py). expected_values.py: apply_modality_lut -> uint16, min 0 max 65490
  // sum 47876329 checksum 23566162968, (0, 0) 26085, (0, 63) 4736, (63, 0) 6586.
  const cv::Mat m = decode("MR_small_modality_lut.dcm");
  ASSERT_EQ(m.type(), CV_16UC1);
  EXPECT_EQ(min_of(m), 0);
  EXPECT_EQ(max_of(m), 65490);
  EXPECT_EQ(sum_of(m), 47876329);
  EXPECT_EQ(checksum(m), 23566162968.0);
  EXPECT_EQ(at(m, 0, 0), 26085);  // stored 905: entry 705
  EXPECT_EQ(at(m, 0, 63), 4736);
  EXPECT_EQ(at(m, 63, 0), 6586);
}

TEST(DicomCodec, RgbRleDecodesToPydicomsValues) {
  // expected_values.py: SC_rgb_rle.dcm pixel_array uint8 (100, 100, 3), sum 3831000, checksum 1917415500,
  // (0, 0) [255, 0, 0], (50, 5) [128, 128, 255], (99, 99) [255, 255, 255].
  const cv::Mat rgb = decode("SC_rgb_rle.dcm");
  ASSERT_EQ(rgb.type(), CV_8UC3);
  ASSERT_EQ(rgb.size(), cv::Size(100, 100));
  EXPECT_EQ(sum_of(rgb), 3831000);
  EXPECT_EQ(checksum(rgb), 1917415500);
  EXPECT_EQ(rgb.at<cv::Vec3b>(0, 0), cv::Vec3b(255, 0, 0)) << "RGB order, not BGR";
  EXPECT_EQ(rgb.at<cv::Vec3b>(50, 5), cv::Vec3b(128, 128, 255));
  EXPECT_EQ(rgb.at<cv::Vec3b>(99, 99), cv::Vec3b(255, 255, 255));
}

TEST(DicomCodec, JpegLosslessColourIsTheRleImage) {
  // SC_rgb_jpeg_gdcm.dcm: JPEG lossless, process 14 SV1 (1.2.840.10008.1.2.4.70), the same picture.
  const ByteVector bytes = read_fixture("SC_rgb_jpeg_gdcm.dcm");
  EXPECT_EQ(probe_dicom(bytes, "gdcm").transfer_syntax, "1.2.840.10008.1.2.4.70");
  EXPECT_TRUE(identical(decode_dicom(bytes, "gdcm"), decode("SC_rgb_rle.dcm")));
}

TEST(DicomCodec, JpegBaselineYbrComesOutAsRgbCloseToTheLosslessImage) {
  // SC_rgb_jpeg_dcmtk.dcm: JPEG baseline (lossy), YBR_FULL; DCMTK converts it to RGB.
  const cv::Mat lossy = decode("SC_rgb_jpeg_dcmtk.dcm");
  const cv::Mat reference = decode("SC_rgb_rle.dcm");
  ASSERT_EQ(lossy.type(), CV_8UC3);
  ASSERT_EQ(lossy.size(), reference.size());
  cv::Mat diff;
  cv::absdiff(lossy, reference, diff);
  EXPECT_LT(cv::mean(diff.reshape(1))[0], 2.0);
  // Pillow through pydicom (expected_values.py) gives sum 3836400 for the same file.
  EXPECT_NEAR(sum_of(lossy), 3836400, 0.002 * 3836400);
}

TEST(DicomCodec, JpegExtended12BitMatchesPydicomsReference) {
  // JPGExtended.dcm (1.2.840.10008.1.2.4.51, 12 bits stored): pydicom's own pixel references
  // (tests/pixels/pixels_reference.py, JPGE_16_12_1_0_1F_M2, decoded by pylibjpeg and GDCM):
  // arr[420, 140] == 244 and arr[230, 120] == 95. Pydicom here has no 12-bit JPEG decoder.
  const cv::Mat m = decode("JPGExtended.dcm");
  ASSERT_EQ(m.type(), CV_16UC1);
  ASSERT_EQ(m.size(), cv::Size(256, 1024));
  EXPECT_EQ(at(m, 420, 140), 244);
  EXPECT_EQ(at(m, 230, 120), 95);
  EXPECT_LE(max_of(m), 4095);
}

TEST(DicomCodec, SixteenBitRgbIsSixteenBitRgb) {
  // expected_values.py: SC_rgb_rle_16bit.dcm uint16 (100, 100, 3), sum 984567000, checksum 492775783500,
  // (50, 5) [32896, 32896, 65535].
  const cv::Mat rgb = decode("SC_rgb_rle_16bit.dcm");
  ASSERT_EQ(rgb.type(), CV_16UC3);
  EXPECT_EQ(sum_of(rgb), 984567000);
  EXPECT_EQ(checksum(rgb), 492775783500.0);
  EXPECT_EQ(rgb.at<cv::Vec3w>(50, 5), cv::Vec3w(32896, 32896, 65535));
}

TEST(DicomCodec, NativeRgbInBothPlanarConfigurations) {
  // SC_rgb_small_odd.dcm: 3x3, explicit little endian, colour-by-pixel. pydicom's pixel_array rows
  // are [166 141 52] x3, [63 87 176] x3, [158 158 158] x3.
  const cv::Mat odd = decode("SC_rgb_small_odd.dcm");
  ASSERT_EQ(odd.type(), CV_8UC3);
  for (int x = 0; x < 3; ++x) {
    EXPECT_EQ(odd.at<cv::Vec3b>(0, x), cv::Vec3b(166, 141, 52));
    EXPECT_EQ(odd.at<cv::Vec3b>(1, x), cv::Vec3b(63, 87, 176));
    EXPECT_EQ(odd.at<cv::Vec3b>(2, x), cv::Vec3b(158, 158, 158));
  }
  // ExplVR_BigEnd.dcm: 80x60, explicit big endian, colour-by-plane. expected_values.py: sum 2470716,
  // checksum 1215869569, (0, 0) [171, 171, 171], (30, 40) [255, 255, 0], (59, 79) [255, 232, 0].
  const cv::Mat be = decode("ExplVR_BigEnd.dcm");
  ASSERT_EQ(be.type(), CV_8UC3);
  ASSERT_EQ(be.size(), cv::Size(80, 60));
  EXPECT_EQ(sum_of(be), 2470716);
  EXPECT_EQ(checksum(be), 1215869569);
  EXPECT_EQ(be.at<cv::Vec3b>(0, 0), cv::Vec3b(171, 171, 171));
  EXPECT_EQ(be.at<cv::Vec3b>(30, 40), cv::Vec3b(255, 255, 0));
  EXPECT_EQ(be.at<cv::Vec3b>(59, 79), cv::Vec3b(255, 232, 0));
}

TEST(DicomCodec, UncompressedYbrFull422IsConvertedToRgbLikePydicom) {
  // expected_values.py: convert_color_space(pixel_array, 'YBR_FULL', 'RGB') (pixel_array already
  // expanded from 4:2:2) -> sum 3832000, checksum 1918179100, (0, 0) [254, 0, 0], (50, 50) [125, 130, 255].
  const cv::Mat rgb = decode("SC_ybr_full_422_uncompressed.dcm");
  ASSERT_EQ(rgb.type(), CV_8UC3);
  EXPECT_EQ(sum_of(rgb), 3832000);
  EXPECT_EQ(checksum(rgb), 1918179100);
  EXPECT_EQ(rgb.at<cv::Vec3b>(0, 0), cv::Vec3b(254, 0, 0));
  EXPECT_EQ(rgb.at<cv::Vec3b>(50, 50), cv::Vec3b(125, 130, 255));
}

TEST(DicomCodec, DeflatedLittleEndianDecodes) {
  // image_dfl.dcm (1.2.840.10008.1.2.1.99). expected_values.py: uint8 (512, 512), sum 33322688,
  // checksum 16665175080, (0, 0) 213, (256, 256) 65, (100, 400) 70.
  const ByteVector bytes = read_fixture("image_dfl.dcm");
  EXPECT_EQ(probe_dicom(bytes, "dfl").transfer_syntax, "1.2.840.10008.1.2.1.99");
  const cv::Mat m = decode_dicom(bytes, "dfl");
  ASSERT_EQ(m.type(), CV_8UC1);
  EXPECT_EQ(sum_of(m), 33322688);
  EXPECT_EQ(checksum(m), 16665175080.0);
  EXPECT_EQ(at(m, 0, 0), 213);
  EXPECT_EQ(at(m, 256, 256), 65);
  EXPECT_EQ(at(m, 100, 400), 70);
}

TEST(DicomCodec, OneBitSegmentationUnpacksToZeroAndOne) {
  // liver_1frame.dcm: Bits Allocated 1. expected_values.py: uint8 (512, 512), sum 36233, checksum 18129556.
  const cv::Mat m = decode("liver_1frame.dcm");
  ASSERT_EQ(m.type(), CV_8UC1);
  EXPECT_EQ(max_of(m), 1);
  EXPECT_EQ(sum_of(m), 36233);
  EXPECT_EQ(checksum(m), 18129556);
  EXPECT_EQ(at(m, 256, 256), 1);
}

TEST(DicomCodec, MultiFrameGivesTheFirstFrame) {
  // SC_rgb_rle_2frame.dcm: frame 0 is SC_rgb_rle.dcm's picture, frame 1 its inverse (checked with
  // pydicom: np.array_equal(a[0], rle), np.array_equal(a[1], 255 - rle)).
  const ByteVector two = read_fixture("SC_rgb_rle_2frame.dcm");
  EXPECT_EQ(probe_dicom(two, "two").frames, 2);
  EXPECT_TRUE(identical(decode_dicom(two, "two"), decode("SC_rgb_rle.dcm")));
  // rtdose.dcm: 15 frames of 10x10 unsigned 32-bit, implicit VR. expected_values.py, frame 0:
  // min 795000 max 1254000 sum 101378000 checksum 4706067000, (0, 0) 1249000, (5, 5) 978000, (9, 9) 798000.
  const cv::Mat dose = decode("rtdose.dcm");
  ASSERT_EQ(dose.type(), CV_32FC1) << "32-bit samples";
  ASSERT_EQ(dose.size(), cv::Size(10, 10));
  EXPECT_EQ(min_of(dose), 795000);
  EXPECT_EQ(max_of(dose), 1254000);
  EXPECT_EQ(sum_of(dose), 101378000);
  EXPECT_EQ(checksum(dose), 4706067000.0);
  EXPECT_EQ(at(dose, 0, 0), 1249000);
  EXPECT_EQ(at(dose, 5, 5), 978000);
  EXPECT_EQ(at(dose, 9, 9), 798000);
}

// ---- header ----------------------------------------------------------------------------------------

TEST(DicomCodec, ProbeReportsTheHeaderFields) {
  const DicomInfo ct = probe_dicom(read_fixture("CT_small.dcm"), "ct");
  EXPECT_EQ(ct.width, 128);
  EXPECT_EQ(ct.height, 128);
  EXPECT_EQ(ct.channels, 1);
  EXPECT_EQ(ct.frames, 1);
  EXPECT_EQ(ct.bits_allocated, 16);
  EXPECT_EQ(ct.bits_stored, 16);
  EXPECT_TRUE(ct.is_signed);
  EXPECT_EQ(ct.slope, 1.0);
  EXPECT_EQ(ct.intercept, -1024.0);
  EXPECT_EQ(ct.photometric, "MONOCHROME2");
  EXPECT_EQ(ct.transfer_syntax, "1.2.840.10008.1.2.1");
  EXPECT_EQ(ct.modality, "CT");

  const DicomInfo rgb = probe_dicom(read_fixture("SC_rgb_rle_16bit.dcm"), "rgb");
  EXPECT_EQ(rgb.width, 100);
  EXPECT_EQ(rgb.channels, 3);
  EXPECT_EQ(rgb.bits_allocated, 16);
  EXPECT_FALSE(rgb.is_signed);
  EXPECT_EQ(rgb.photometric, "RGB");
  EXPECT_EQ(rgb.transfer_syntax, "1.2.840.10008.1.2.5");
  EXPECT_EQ(rgb.modality, "OT");

  const DicomInfo bits12 = probe_dicom(read_fixture("MR_small_bits12.dcm"), "mr");
  EXPECT_EQ(bits12.bits_allocated, 16);
  EXPECT_EQ(bits12.bits_stored, 12);
  const DicomInfo rescaled = probe_dicom(read_fixture("MR_small_rescale.dcm"), "mr");
  EXPECT_EQ(rescaled.slope, 0.5);
  EXPECT_EQ(rescaled.intercept, -3.25);
}

TEST(DicomCodec, ProbeDoesNotNeedTheDecoder) {
  // The header of a JPEG 2000 file probes; decoding it is refused with the syntax named.
  const ByteVector j2k = read_fixture("MR_small_jp2klossless.dcm");
  const DicomInfo info = probe_dicom(j2k, "j2k.dcm");
  EXPECT_EQ(info.transfer_syntax, "1.2.840.10008.1.2.4.90");
  EXPECT_EQ(info.width, 64);
  const std::string what = decode_error(j2k, "j2k.dcm");
  EXPECT_NE(what.find("JPEG 2000 (1.2.840.10008.1.2.4.90) is not supported"), std::string::npos) << what;
}

TEST(DicomCodec, LooksLikeDicomChecksThePreambleAndMagic) {
  EXPECT_TRUE(looks_like_dicom(read_fixture("CT_small.dcm")));
  EXPECT_TRUE(looks_like_dicom(read_fixture("MR_small_RLE.dcm")));
  ByteVector minimal(132, std::byte{0});
  std::memcpy(minimal.data() + 128, "DICM", 4);
  EXPECT_TRUE(looks_like_dicom(minimal));
  EXPECT_FALSE(looks_like_dicom(std::span(minimal).first(131)));
  minimal[131] = std::byte{'X'};
  EXPECT_FALSE(looks_like_dicom(minimal));
  EXPECT_FALSE(looks_like_dicom(encode_jpeg(cv::Mat(16, 16, CV_8UC3, cv::Scalar(10, 200, 30)))));
  EXPECT_FALSE(looks_like_dicom({}));
}

// ---- bad input -------------------------------------------------------------------------------------

TEST(DicomCodec, TruncatedFileIsADecodeErrorSayingWhereThePixelDataEnds) {
  // MR_truncated.dcm: MR_small.dcm cut 200 bytes short, so the last 62 bytes of its 8192-byte Pixel
  // Data (and the 138 bytes of elements after it) are missing.
  const ByteVector bytes = read_fixture("MR_truncated.dcm");
  const std::string what = decode_error(bytes, "MR_truncated.dcm");
  EXPECT_NE(what.find("truncated file: the Pixel Data ends after 8130 of 8192 bytes"), std::string::npos) << what;
  // The header is whole, so it still probes.
  EXPECT_EQ(probe_dicom(bytes, "MR_truncated.dcm").width, 64);
}

TEST(DicomCodec, FilesCutAnywhereAreDecodeErrors) {
  for (const char* file : {"MR_small.dcm", "MR_small_RLE.dcm", "MR_small_jpeg_ls_lossless.dcm", "SC_rgb_jpeg_gdcm.dcm",
                           "image_dfl.dcm", "MR_small_bigendian.dcm"}) {
    const ByteVector whole = read_fixture(file);
    for (const std::size_t length : {std::size_t{0}, std::size_t{100}, std::size_t{131}, std::size_t{132},
                                     std::size_t{300}, std::size_t{700}, whole.size() / 2, whole.size() - 100,
                                     whole.size() - 1}) {
      const ByteVector cut(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(length));
      SCOPED_TRACE(std::string(file) + " cut to " + std::to_string(length) + " bytes");
      if (std::string(file) == "image_dfl.dcm" && length == whole.size() - 1) {
        // The last byte of a deflated file is zlib's checksum, which DCMTK does not check: the
        // data itself is whole. It must then decode to the whole image.
        try {
          EXPECT_TRUE(identical(decode_dicom(cut, "cut.dcm"), decode_dicom(whole, "whole.dcm")));
        } catch (const DecodeError&) {
        }
        continue;
      }
      decode_error(cut, "cut.dcm");
    }
  }
  // A cut inside native Pixel Data is reported with the byte counts. (MR_small.dcm's 8192 bytes of
  // Pixel Data start at byte 1500; 138 bytes of other elements follow them.)
  const ByteVector mr = read_fixture("MR_small.dcm");
  const std::string what = decode_error(ByteVector(mr.begin(), mr.end() - 1000), "cut.dcm");
  EXPECT_NE(what.find("the Pixel Data ends after 7330 of 8192 bytes"), std::string::npos) << what;
}

TEST(DicomCodec, MissingPixelDataIsADecodeError) {
  const ByteVector mr = read_fixture("MR_small.dcm");
  const ByteVector header(mr.begin(), mr.begin() + static_cast<std::ptrdiff_t>(find_element(mr, 0x7FE0, 0x0010, "OW")));
  const std::string what = decode_error(header, "header.dcm");
  EXPECT_NE(what.find("no Pixel Data"), std::string::npos) << what;
}

TEST(DicomCodec, ZeroOrHugeDimensionsAreDecodeErrors) {
  const ByteVector mr = read_fixture("MR_small.dcm");
  const std::size_t rows = find_element(mr, 0x0028, 0x0010, "US") + 8;
  const std::size_t columns = find_element(mr, 0x0028, 0x0011, "US") + 8;

  ByteVector zero = mr;
  put_u16(zero, rows, 0);
  EXPECT_NE(decode_error(zero, "zero.dcm").find("empty"), std::string::npos);
  EXPECT_THROW(probe_dicom(zero, "zero.dcm"), DecodeError);

  ByteVector huge = mr;  // 65535 x 65535: refused before the 8192 bytes of Pixel Data are looked at
  put_u16(huge, rows, 65535);
  put_u16(huge, columns, 65535);
  const std::string what = decode_error(huge, "huge.dcm");
  EXPECT_NE(what.find("more than the limit of 64000000"), std::string::npos) << what;

  ByteVector short_data = mr;  // 64 x 128 needs 16384 bytes; the file has 8192
  put_u16(short_data, rows, 128);
  EXPECT_NE(decode_error(short_data, "short.dcm").find("fewer than the 16384"), std::string::npos);
}

TEST(DicomCodec, NonDicomBytesAreDecodeErrors) {
  const ByteVector jpeg = encode_jpeg(cv::Mat(16, 16, CV_8UC3, cv::Scalar(10, 200, 30)));
  EXPECT_NE(decode_error(jpeg, "photo.jpg").find("not a DICOM Part 10 file"), std::string::npos);
  EXPECT_NE(decode_error({}, "empty.dcm").find("not a DICOM Part 10 file"), std::string::npos);
  ByteVector text(400, std::byte{'a'});
  EXPECT_NE(decode_error(text, "text.dcm").find("first bytes: 61 61"), std::string::npos);
  EXPECT_THROW(probe_dicom(jpeg, "photo.jpg"), DecodeError);
  // "DICM" and then nothing DICOM.
  ByteVector magic_only(132 + 64, std::byte{0x5A});
  std::memcpy(magic_only.data() + 128, "DICM", 4);
  decode_error(magic_only, "magic.dcm");
}

TEST(DicomCodec, GarbledFilesNeverCrashAndFailOnlyWithDecodeError) {
  // Random bytes overwritten anywhere: each decode either returns an image or throws DecodeError
  // (damaged entropy-coded data may still decode to something). Run under ASan to see reads out of bounds.
  std::mt19937 random(20240611);
  int failures = 0;
  int images = 0;
  for (const char* file : {"MR_small.dcm", "MR_small_RLE.dcm", "MR_small_jpeg_ls_lossless.dcm", "SC_rgb_jpeg_gdcm.dcm",
                           "SC_rgb_jpeg_dcmtk.dcm", "CT_small.dcm", "MR_small_modality_lut.dcm"}) {
    const ByteVector whole = read_fixture(file);
    for (int trial = 0; trial < 60; ++trial) {
      ByteVector garbled = whole;
      const int edits = 1 + static_cast<int>(random() % 8);
      for (int e = 0; e < edits; ++e) {
        const std::size_t at = 132 + random() % (garbled.size() - 132);
        garbled[at] = static_cast<std::byte>(random() & 0xFF);
      }
      try {
        const cv::Mat m = decode_dicom(garbled, "garbled.dcm");
        EXPECT_FALSE(m.empty());
        ++images;
      } catch (const DecodeError& e) {
        EXPECT_EQ(std::string(e.what()).rfind("garbled.dcm: DICOM: ", 0), 0U) << e.what();
        ++failures;
      } catch (const std::exception& e) {
        ADD_FAILURE() << file << " trial " << trial << ": " << typeid(e).name() << ": " << e.what();
      }
    }
  }
  EXPECT_GT(failures, 0);
  EXPECT_GT(images, 0);
}

// ---- threads and the codec callable ----------------------------------------------------------------

TEST(DicomCodec, FourThreadsDecodeTheSameAsOne) {
  const std::vector<std::string> files = {"CT_small.dcm",          "MR_small_RLE.dcm",     "MR_small_jpeg_ls_lossless.dcm",
                                          "SC_rgb_jpeg_gdcm.dcm",  "SC_rgb_jpeg_dcmtk.dcm", "image_dfl.dcm",
                                          "MR_small_bigendian.dcm", "JPGExtended.dcm"};
  std::vector<ByteVector> bytes;
  std::vector<cv::Mat> expected;
  for (const std::string& file : files) {
    bytes.push_back(read_fixture(file));
    expected.push_back(decode_dicom(bytes.back(), file));
  }
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (std::size_t k = 0; k < files.size(); ++k) {
          const std::size_t i = (k + static_cast<std::size_t>(t)) % files.size();  // threads at different files
          try {
            if (!identical(decode_dicom(bytes[i], files[i]), expected[i])) ++mismatches[static_cast<std::size_t>(t)];
          } catch (const std::exception&) {
            ++mismatches[static_cast<std::size_t>(t)];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[static_cast<std::size_t>(t)], 0) << "thread " << t;
}

TEST(DicomCodec, DicomCodecIsAnOtherFormatDecoderThatDecodesLikeDecodeDicom) {
  const OtherFormatDecoder codec = dicom_codec();
  ASSERT_TRUE(codec);
  const ByteVector ct = read_fixture("CT_small.dcm");
  EXPECT_TRUE(identical(codec(ct, "ct"), decode_dicom(ct, "ct")));
  EXPECT_THROW(codec(ByteVector(10, std::byte{1}), "x"), DecodeError);
  // With a decoder for the rest, what is not DICOM goes there.
  const OtherFormatDecoder both = dicom_codec([](std::span<const std::byte>, const std::string&) {
    return cv::Mat(2, 3, CV_8UC3, cv::Scalar(7, 8, 9));
  });
  EXPECT_TRUE(identical(both(ct, "ct"), decode_dicom(ct, "ct")));
  EXPECT_EQ(both(ByteVector(10, std::byte{1}), "x").size(), cv::Size(3, 2));
}

// A Decoder with DecodeColor::keep decodes DICOM like any image: CT_small's Hounsfield units come
// through decode and through a region that needs no resampling bit for bit; the RGB default
// refuses them, naming the way out.
TEST(DicomCodec, ADecoderKeepsHounsfieldUnitsThroughDecodeAndCrop) {
  const ByteVector ct = read_fixture("CT_small.dcm");
  const cv::Mat hu = decode_dicom(ct, "ct");
  ASSERT_EQ(hu.type(), CV_16SC1);
  Sample sample;
  sample.bytes = Bytes(ByteVector(ct));
  sample.name = "CT_small.dcm";
  sample.label = 3;
  const Decoder keep({.other_formats = dicom_codec(), .color = DecodeColor::keep});
  EXPECT_EQ(detect_format(ct), ImageFormat::dicom);
  const ImageInfo info = keep.probe(sample);
  EXPECT_EQ(info.format, ImageFormat::dicom);
  EXPECT_EQ(cv::Size(info.width, info.height), hu.size());
  const Image whole = keep.decode(sample);
  EXPECT_TRUE(identical(whole.pixels, hu));
  EXPECT_EQ(whole.label, 3);
  const cv::Rect crop(20, 10, 30, 25);
  const Image part = keep.decode(sample, Region{crop, crop.size()});
  EXPECT_TRUE(identical(part.pixels, hu(crop).clone()));
  try {
    Decoder({.other_formats = dicom_codec()}).decode(sample);
    FAIL() << "Hounsfield units came back as 8-bit RGB";
  } catch (const DecodeError& e) {
    EXPECT_NE(std::string(e.what()).find("DecodeColor::keep"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stoke::nodes
