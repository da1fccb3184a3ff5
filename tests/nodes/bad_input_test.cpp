// Damaged and hostile input: every file of a corpus of truncated, corrupted, mislabelled and
// oversized images ends in a DecodeError naming the file (or, for another format when the build
// has stoke::imgcodecs, a correct decode) -- never a crash, hang or exit; and a pipeline with
// OnError::skip lists exactly the bad files while delivering the good ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dataset_test_support.hpp"
#include "decode_test_support.hpp"
#include "stoke/graph/errors.hpp"
#include "stoke/graph/pipeline.hpp"
#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/random.hpp"
#ifdef STOKE_TEST_HAVE_IMGCODECS
#include "stoke/nodes/opencv_codec.hpp"
#endif

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;
using test::make_sample;

std::vector<std::byte> fixture(const std::string& file) {
  return read_file(std::string(STOKE_TEST_DATA_DIR) + "/" + file);
}

std::vector<std::byte> prefix(const std::vector<std::byte>& bytes, std::size_t length) {
  return {bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(std::min(length, bytes.size()))};
}

// Offset of the first entropy-coded byte (just after the SOS segment).
std::size_t entropy_start(const std::vector<std::byte>& jpeg) {
  const std::size_t sos = test::find_marker(jpeg, 0xDA);
  return sos + 2 + (std::to_integer<std::size_t>(jpeg[sos + 2]) << 8 | std::to_integer<std::size_t>(jpeg[sos + 3]));
}

// What a file of the corpus must do.
enum class Expect {
  decodes,
  fails,
  fails_late,              // damaged only after the first rows: fails decoded whole, a region at the top may decode
  decodes_with_imgcodecs,  // another format: decodes when other_formats is stoke::imgcodecs
};

struct Entry {
  std::string file;
  std::vector<std::byte> bytes;
  Expect expect;
  bool probe_ok;  // the header is intact (and, for other formats, irrelevant: no decoder is set)
};

// The corpus, built from code. Every "fails" entry fails deterministically (strict decoding).
std::vector<Entry> corpus() {
  const std::vector<std::byte> good = encode_jpeg(test::test_picture(96, 64), 90);
  cv::Mat gray;
  cv::extractChannel(test::test_picture(40, 30), gray, 2);
  const std::size_t sof = test::find_marker(good, 0xC0);
  const std::size_t dht = test::find_marker(good, 0xC4);
  const std::size_t sos = test::find_marker(good, 0xDA);
  const std::size_t data = entropy_start(good);
  const auto patched = [&](std::size_t at, unsigned value) {
    std::vector<std::byte> bytes = good;
    bytes[at] = static_cast<std::byte>(value);
    return bytes;
  };
  std::vector<std::byte> eoi_inside = good;  // an EOI marker in the middle of the entropy data
  eoi_inside[(data + good.size()) / 2] = std::byte{0xFF};
  eoi_inside[(data + good.size()) / 2 + 1] = std::byte{0xD9};
  std::vector<std::byte> text;
  for (const char c : std::string("this is not a picture\n")) text.push_back(static_cast<std::byte>(c));

  return {
      {"good.jpg", good, Expect::decodes, true},
      {"good_gray.jpg", encode_jpeg(gray, 90), Expect::decodes, true},
      {"good_cmyk.jpg", test::encode_cmyk(test::rgb_to_cmyk(test::test_picture(24, 16), true), JCS_CMYK),
       Expect::decodes, true},
      {"truncated_3.jpg", prefix(good, 3), Expect::fails, false},
      {"truncated_40.jpg", prefix(good, 40), Expect::fails, false},
      {"truncated_in_header.jpg", prefix(good, sos), Expect::fails, false},
      {"truncated_at_data.jpg", prefix(good, data), Expect::fails, true},
      {"truncated_half.jpg", prefix(good, good.size() / 2), Expect::fails_late, true},
      {"truncated_no_eoi.jpg", prefix(good, good.size() - 2), Expect::fails_late, true},
      {"flipped_soi.jpg", patched(1, 0xD0), Expect::fails, false},
      {"flipped_precision.jpg", patched(sof + 4, 12), Expect::fails, false},
      {"flipped_components.jpg", patched(sof + 9, 0), Expect::fails, false},
      {"flipped_huffman_class.jpg", patched(dht + 4, 0x55), Expect::fails, false},
      {"flipped_scan_component.jpg", patched(sos + 5, 9), Expect::fails, false},
      {"flipped_entropy_eoi.jpg", eoi_inside, Expect::fails_late, true},
      {"empty.jpg", {}, Expect::fails, false},
      {"text.jpg", text, Expect::fails, false},
      {"png_named.jpg", fixture("decode_tiny.png"), Expect::decodes_with_imgcodecs, false},
      {"picture.gif", fixture("decode_tiny.gif"), Expect::fails, false},  // OpenCV 4.6 has no GIF reader
      {"bomb.jpg", test::with_frame_size(good, 65535, 65535), Expect::fails, false},
  };
}

// The corpus written to a fresh temporary folder, removed afterwards.
class BadInput : public ::testing::Test {
 protected:
  // mkdtemp, not a name drawn from a seed: ctest runs each test in its own process, in parallel,
  // and a name made from gtest's seed and a heap address repeats across processes (ASan's
  // allocator hands out the same addresses), so one test's TearDown removed another's files.
  void SetUp() override {
    for (Entry& entry : corpus()) {
      const fs::path path = dir_ / entry.file;
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(entry.bytes.data()), static_cast<std::streamsize>(entry.bytes.size()));
      entries_.push_back({path.string(), std::move(entry.bytes), entry.expect, entry.probe_ok});
    }
  }

  bool has_imgcodecs() const {
#ifdef STOKE_TEST_HAVE_IMGCODECS
    return true;
#else
    return false;
#endif
  }
  DecodeOptions options(bool with_other_formats) const {
    DecodeOptions result;
#ifdef STOKE_TEST_HAVE_IMGCODECS
    if (with_other_formats) result.other_formats = opencv_codec();
#else
    (void)with_other_formats;
#endif
    return result;
  }
  bool should_decode(const Entry& entry, bool with_other_formats) const {
    return entry.expect == Expect::decodes ||
           (entry.expect == Expect::decodes_with_imgcodecs && with_other_formats && has_imgcodecs());
  }

  test::TempDir dir_;
  std::vector<Entry> entries_;  // file is the full path
};

TEST_F(BadInput, EveryFileDecodesOrFailsNamingItself) {
  for (const bool with_other_formats : {false, true}) {
    const Decoder decoder(options(with_other_formats));
    for (const Entry& entry : entries_) {
      const Sample sample = make_sample(read_file(entry.file), entry.file);
      const bool ok = should_decode(entry, with_other_formats);
      for (const bool fused : {false, true}) {
        SCOPED_TRACE(entry.file + (fused ? " (region)" : " (whole)") + (with_other_formats ? " +imgcodecs" : ""));
        try {
          const Image image =
              fused ? decoder.decode(sample, Region{cv::Rect(1, 1, 4, 3), cv::Size(8, 6)}) : decoder.decode(sample);
          // Decoding stops after a region's last row: damage below it is not seen.
          EXPECT_TRUE(ok || (fused && entry.expect == Expect::fails_late)) << "decoded, but should have failed";
          EXPECT_EQ(image.pixels.type(), CV_8UC3);
        } catch (const DecodeError& e) {
          EXPECT_FALSE(ok) << "failed, but should have decoded: " << e.what();
          EXPECT_EQ(std::string(e.what()).rfind(entry.file + ": ", 0), 0u) << e.what();
        }
      }
    }
  }
}

TEST_F(BadInput, ProbeFailsOnBadHeadersOnly) {
  const Decoder decoder;
  for (const Entry& entry : entries_) {
    const Sample sample = make_sample(read_file(entry.file), entry.file);
    if (entry.probe_ok) {
      EXPECT_NO_THROW(decoder.probe(sample)) << entry.file;
    } else {
      EXPECT_THROW(decoder.probe(sample), DecodeError) << entry.file;
    }
  }
}

TEST(RandomDamage, FlippedBytesNeverCrash) {
  // Single-byte changes all over a JPEG: each must fail naming the file or give a picture. JPEG
  // has no checksum: libjpeg notices a damaged entropy stream only when it stops making sense (a
  // bad Huffman code, a marker or bytes left over at the end of the scan), and most flips merely
  // decode to wrong pixels. Strict decoding caught 47 of these 200 entropy-data flips.
  const std::vector<std::byte> good = encode_jpeg(test::test_picture(160, 120), 85);
  const std::size_t data = entropy_start(good);
  ItemRng rng(2024, 0, 0);
  int caught = 0;
  int flips = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::byte> bytes = good;
    const bool in_header = trial % 3 == 0;
    const auto at = static_cast<std::size_t>(
        in_header ? rng.uniform_int(2, static_cast<std::int64_t>(data) - 1)
                  : rng.uniform_int(static_cast<std::int64_t>(data), static_cast<std::int64_t>(good.size()) - 3));
    bytes[at] ^= static_cast<std::byte>(rng.uniform_int(1, 255));
    const Sample sample = make_sample(bytes, "flip@" + std::to_string(at));
    for (const bool strict : {true, false}) {
      try {
        const cv::Mat pixels = Decoder({.strict = strict}).decode(sample).pixels;
        EXPECT_EQ(pixels.type(), CV_8UC3);
        EXPECT_GT(pixels.total(), 0u);
      } catch (const DecodeError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(sample.name + ": ", 0), 0u) << e.what();
        if (strict && !in_header) ++caught;
      }
    }
    if (!in_header) ++flips;
  }
  std::printf("  strict decoding caught %d of %d entropy-data flips\n", caught, flips);
  EXPECT_GT(caught, flips / 8);
}

// ---- in a pipeline -------------------------------------------------------------------------------

// source (the corpus, sorted) -> map "decode" (parallel) -> sink; returns the delivered names.
graph::RunReport run_pipeline(const std::vector<std::string>& files, const Decoder& decoder, graph::OnError on_error,
                              std::vector<std::string>& delivered) {
  graph::Pipeline pipe({.max_in_flight = 8, .threads = 4});
  std::size_t next = 0;
  pipe.source("files",
              [&]() -> std::optional<Sample> {
                if (next == files.size()) return std::nullopt;
                Sample sample = make_sample(read_file(files[next]), files[next], next);
                ++next;
                return sample;
              })
      .map(
          "decode", [&decoder](Sample sample) { return decoder.decode(sample); },
          graph::StageOptions{.concurrency = graph::parallel(4), .on_error = on_error})
      .sink("collect", [&](Image image) { delivered.push_back(image.name); });
  return pipe.run();
}

TEST_F(BadInput, PipelineSkipsAndListsTheBadFiles) {
  std::vector<std::string> files;
  for (const Entry& entry : entries_) files.push_back(entry.file);
  std::sort(files.begin(), files.end());
  const Decoder decoder(options(true));
  std::vector<std::string> delivered;
  const graph::RunReport report = run_pipeline(files, decoder, graph::OnError::skip, delivered);

  std::vector<std::string> expected_good;
  std::map<std::uint64_t, std::string> expected_bad;  // source index -> file
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto entry =
        std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.file == files[i]; });
    if (should_decode(*entry, true)) {
      expected_good.push_back(files[i]);
    } else {
      expected_bad[i] = files[i];
    }
  }
  std::sort(delivered.begin(), delivered.end());
  EXPECT_EQ(delivered, expected_good);
  EXPECT_EQ(report.produced, files.size());
  EXPECT_EQ(report.consumed, expected_good.size());
  EXPECT_EQ(report.skipped, expected_bad.size());
  ASSERT_EQ(report.skipped_items.size(), expected_bad.size());
  for (const graph::SkippedItem& item : report.skipped_items) {
    EXPECT_EQ(item.stage, "decode");
    ASSERT_TRUE(expected_bad.contains(item.index)) << item.index << ": " << item.reason;
    EXPECT_NE(item.reason.find(expected_bad[item.index] + ": "), std::string::npos) << item.reason;
  }
}

TEST_F(BadInput, PipelineFailsNamingTheFile) {
  std::vector<std::string> files;
  for (const Entry& entry : entries_) {
    if (entry.expect == Expect::decodes) files.push_back(entry.file);
  }
  const std::string bad = (dir_ / "truncated_half.jpg").string();
  files.insert(files.begin() + 1, bad);
  std::vector<std::string> delivered;
  try {
    run_pipeline(files, Decoder(), graph::OnError::fail, delivered);
    FAIL() << "expected run() to throw";
  } catch (const graph::StageError& e) {
    EXPECT_EQ(e.stage(), "decode");
    EXPECT_EQ(e.index(), 1u);
    EXPECT_NE(std::string(e.what()).find(bad + ": JPEG: "), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace stoke::nodes
