// make_fuzz_seeds: writes the generated seed inputs of the fuzz harnesses into <dir>/<harness>/
// (tests/fuzz/corpus in the repository), each a small valid input made with stoke's own writers
// where there is one (encode_jpeg, PackWriter, TarWriter, TarShards' index) so that the seeds
// follow the formats as the library writes them. The DICOM seeds are files of tests/data/dicom
// (pydicom's test files, MIT; copied by hand with their licence), not generated.
//
//   build/fuzz/nodes/fuzz/make_fuzz_seeds tests/fuzz/corpus
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <opencv2/core.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fixed_tar.hpp"
#include "stoke/nodes/jpeg_encode.hpp"
#include "stoke/nodes/packed.hpp"
#include "stoke/nodes/sample.hpp"
#include "stoke/nodes/tar_shards.hpp"
#include "stoke/nodes/tar_writer.hpp"

namespace {

namespace fs = std::filesystem;
using namespace stoke::nodes;
using Blob = std::vector<std::uint8_t>;

fs::path out_dir;

void put(const std::string& harness, const std::string& name, std::span<const std::uint8_t> bytes) {
  fs::create_directories(out_dir / harness);
  std::ofstream out(out_dir / harness / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + (out_dir / harness / name).string());
}
void put(const std::string& harness, const std::string& name, const std::string& text) {
  put(harness, name, {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()});
}

Blob file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Blob(std::istreambuf_iterator<char>(in), {});
}

Blob to_blob(const std::vector<std::byte>& bytes) {
  const auto* first = reinterpret_cast<const std::uint8_t*>(bytes.data());
  return Blob(first, first + bytes.size());
}

void append_u32(Blob& out, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(value >> (8 * i)));
}

cv::Mat gradient(int width, int height, int channels) {
  cv::Mat image(height, width, channels == 3 ? CV_8UC3 : CV_8UC1);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const auto v = static_cast<std::uint8_t>((x * 255) / std::max(1, width - 1));
      if (channels == 3) {
        image.at<cv::Vec3b>(y, x) = {v, static_cast<std::uint8_t>((y * 255) / std::max(1, height - 1)), 128};
      } else {
        image.at<std::uint8_t>(y, x) = v;
      }
    }
  }
  return image;
}

// ---- images: decode_fuzz and fused_decode_fuzz

void images(const fs::path& scratch) {
  const Blob colour = to_blob(encode_jpeg(gradient(48, 32, 3), 90));
  const Blob small = to_blob(encode_jpeg(gradient(17, 9, 3), 40));
  const Blob gray = to_blob(encode_jpeg(gradient(16, 24, 1), 75));
  // The colour JPEG with an EXIF APP1 (big-endian TIFF, one IFD entry: Orientation = 6) after SOI.
  Blob exif = {0xff, 0xd8, 0xff, 0xe1, 0x00, 0x22, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8,
               0,    1,    0x01, 0x12, 0,    3,    0,   0,   0,   1,   0, 6, 0,   0,   0, 0,  0, 0, 0, 0};
  exif.insert(exif.end(), colour.begin() + 2, colour.end());
  // A PNG signature and IHDR (7 x 5, 8-bit RGB): the header reader's input; the harnesses decode
  // other formats to a fixed picture.
  const Blob png = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 'I',  'H',  'D',  'R', 0,
                    0,    0,   7,   0,   0,    0,    5,    8,    2, 0, 0, 0,  0x7d, 0x8c, 0x4b, 0x26};
  for (const char* harness : {"decode", "fused_decode"}) {
    put(harness, "colour_48x32.jpg", colour);
    put(harness, "colour_17x9_q40.jpg", small);
    put(harness, "gray_16x24.jpg", gray);
    put(harness, "exif_orientation6.jpg", exif);
    put(harness, "header_7x5.png", png);
  }
  // Raw RGB for fused_decode_fuzz: width 1 + 4, height 1 + 2, 5 x 3 x 3 bytes.
  Blob raw = {4, 2};
  for (int i = 0; i < 45; ++i) raw.push_back(static_cast<std::uint8_t>(i * 5));
  put("fused_decode", "raw_5x3.bin", raw);
  (void)scratch;
}

// ---- packed_fuzz: u32 index size, the index, the data file

void packed(const fs::path& scratch) {
  const auto pack = [&](const std::string& name, std::vector<std::string> classes, std::uint32_t resize,
                        const std::vector<std::pair<std::string, int>>& items) {
    const fs::path path = scratch / (name + ".stoke");
    PackWriter writer(path, std::move(classes), resize);
    for (const auto& [text, label] : items) {
      writer.add({reinterpret_cast<const std::byte*>(text.data()), text.size()}, label,
                 label == 2 ? "" : "item-" + std::to_string(label) + ".jpg");
    }
    writer.finish();
    const Blob index = file_bytes(pack_index_path(path));
    const Blob data = file_bytes(path);
    Blob seed;
    append_u32(seed, static_cast<std::uint32_t>(index.size()));
    seed.insert(seed.end(), index.begin(), index.end());
    seed.insert(seed.end(), data.begin(), data.end());
    put("packed", name + ".bin", seed);
  };
  pack("classes", {"cat", "dog", "emu"}, 0, {{"first item", 0}, {"second", 1}, {"no name", 2}, {"", -1}});
  pack("unlabelled", {}, 256, {{"one", -1}, {"two", -1}});
  pack("empty", {"only"}, 0, {});
}

// ---- cifar_fuzz: a mode byte, an optional names file, the batch

void cifar() {
  const auto records = [](int count, int label_bytes, int first_label) {
    Blob out;
    for (int r = 0; r < count; ++r) {
      for (int l = 0; l < label_bytes; ++l) out.push_back(static_cast<std::uint8_t>((first_label + r + l) % 10));
      for (int p = 0; p < 3072; ++p) out.push_back(static_cast<std::uint8_t>(p * 7 + r));
    }
    return out;
  };
  const auto seed = [](std::uint8_t mode, const std::string& names, const Blob& batch) {
    Blob out = {mode};
    if ((mode & 4) != 0) {
      out.push_back(static_cast<std::uint8_t>(names.size()));
      out.push_back(static_cast<std::uint8_t>(names.size() >> 8));
      out.insert(out.end(), names.begin(), names.end());
    }
    out.insert(out.end(), batch.begin(), batch.end());
    return out;
  };
  std::string coarse;
  for (int c = 0; c < 20; ++c) coarse += "coarse_" + std::to_string(c) + "\n";
  put("cifar", "cifar10_2.bin", seed(0, "", records(2, 1, 3)));
  put("cifar", "cifar10_open.bin", seed(8, "", records(1, 1, 9)));
  put("cifar", "cifar100_fine.bin", seed(1, "", records(2, 2, 4)));
  put("cifar", "cifar100_coarse_names.bin", seed(1 | 2 | 4 | 8, coarse, records(1, 2, 5)));
}

// ---- file_list_fuzz, transform_spec_fuzz, coco_fuzz: text

void texts() {
  put("file_list", "legacy.csv", "# a comment\npath,label\na.jpg,0\n\"b,\"\"x\"\".jpg\",1\r\nwith,comma.jpg, 2 \n");
  put("file_list", "plain.csv", "a.jpg,3\nmissing.jpg,0\n");
  put("file_list", "columns.csv",
      "path,label,mask,age,labels\na.jpg,2,m.png,63,0 1 1 0\n\"a,b.png\",,m.png,41.5,\"1 0 0 0\"\n"
      "a.jpg,,,7,1 1 1 1\n");
  put("file_list", "path_only.csv", "path\na.jpg\n/absolute/x.png\n");

  put("transform_spec", "rrc.txt", "random_resized_crop size=32 scale=0.35:1");
  put("transform_spec", "chain.txt",
      "random_resized_crop size=24x16 scale=0.08:1 ratio=0.75:1.33 interpolation=area; random_horizontal_flip p=1; "
      "color_jitter brightness=0.4 contrast=0.4 saturation=0.4 hue=0.1; normalize");
  put("transform_spec", "resize.txt", "resize size=17 interpolation=nearest; center_crop size=12x10");
  put("transform_spec", "boxes.txt", "center_crop size=30; filter_boxes min_visible=0.5 min_size=2");
  put("transform_spec", "normalize.txt", "normalize mean=0.5 std=0.25,0.5,1 range=255; random_horizontal_flip");

  put("coco", "instances.json", R"({
  "images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48},
             {"id": 2, "file_name": "b.jpg", "width": 32, "height": 32}],
  "categories": [{"id": 18, "name": "dog"}, {"id": 1, "name": "person"}],
  "annotations": [{"id": 10, "image_id": 1, "category_id": 18, "bbox": [1.5, 2, 30, 20], "iscrowd": 0},
                  {"id": 11, "image_id": 1, "category_id": 1, "bbox": [0, 0, 64, 48], "iscrowd": 1},
                  {"id": 12, "image_id": 2, "category_id": 1, "bbox": [30, 30, 5, 5]}]
})");
  put("coco", "minimal.json", R"({"images": [], "annotations": [], "categories": []})");
}

// ---- tar_fuzz and tar_index_fuzz

void tars(const fs::path& scratch) {
  const fs::path fixed = scratch / "fixed.tar";
  stoke::fuzz::write_fixed_tar(fixed);
  put("tar", "fixed.tar", file_bytes(fixed));
  {
    // A long key (a ustar name split at a '/') and a second shard-like layout.
    const fs::path other = scratch / "long.tar";
    TarWriter writer(TarShardPattern(other.string()), {.write_index = false});
    const std::string key = std::string(90, 'd') + "/" + std::string(40, 'k');
    const std::vector<TarMember> members = {{"png", stoke::fuzz::text_bytes("\x89PNG")},
                                            {"cls", stoke::fuzz::text_bytes("0")},
                                            {"seg.json", stoke::fuzz::text_bytes("{}")}};
    writer.add(key, members);
    writer.finish();
    put("tar", "long_name.tar", file_bytes(other));
  }
  // The index TarShards writes beside the fixed shard.
  TarShardsOptions options;
  options.fallback_index_dir.clear();
  const TarShards shards(fixed, options);
  put("tar_index", "fixed.tar.stoke-idx", file_bytes(tar_index_path(fixed)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds DIR (writes DIR/<harness>/ seeds)\n");
    return 2;
  }
  out_dir = argv[1];
  const fs::path scratch = fs::temp_directory_path() / ("stoke-fuzz-seeds-" + std::to_string(::getpid()));
  try {
    fs::create_directories(scratch);
    images(scratch);
    packed(scratch);
    cifar();
    texts();
    tars(scratch);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_fuzz_seeds: %s\n", e.what());
    fs::remove_all(scratch);
    return 1;
  }
  fs::remove_all(scratch);
  return 0;
}
