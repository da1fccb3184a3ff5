// decode_fused_bench: how much faster the fused decode-and-crop (Decoder::decode(sample, region))
// is than decoding everything, then cropping and resizing (the unfused path), single-threaded.
//
//   decode_fused_bench [photos-dir] [rounds]
//
// Two workloads, both with torchvision-style RandomResizedCrop regions to 224x224:
//  - "photos": the photos themselves (480x360 to 2268x1512);
//  - "imagenet-like": 64 images of about 500x375 made from random crops of the photos and
//    re-encoded at quality 90 (ImageNet's typical size and decode cost; see the photos' README).
// Prints milliseconds per image (median over rounds) and the ratio plain / fused. Not a test: no
// timing is asserted anywhere.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <opencv2/imgproc.hpp>
#include <string>
#include <vector>

#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/jpeg_encode.hpp"
#include "stoke/nodes/random.hpp"
#include "stoke/nodes/resize.hpp"

namespace {

using namespace stoke::nodes;
using Clock = std::chrono::steady_clock;

cv::Rect random_resized_crop(cv::Size size, ItemRng& rng) {
  const double area = static_cast<double>(size.area());
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(0.08, 1.0);
    const double aspect = std::exp(rng.uniform(std::log(3.0 / 4.0), std::log(4.0 / 3.0)));
    const int w = static_cast<int>(std::lround(std::sqrt(target * aspect)));
    const int h = static_cast<int>(std::lround(std::sqrt(target / aspect)));
    if (w > 0 && h > 0 && w <= size.width && h <= size.height) {
      const int y = static_cast<int>(rng.uniform_int(0, size.height - h));
      const int x = static_cast<int>(rng.uniform_int(0, size.width - w));
      return {x, y, w, h};
    }
  }
  return {0, 0, size.width, size.height};
}

struct Item {
  Sample sample;
  Region region;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds per item of plain and fused decoding over `items`, median of `rounds` rounds
// (the two interleaved round by round, so that machine load affects both alike).
void run(const char* label, const std::vector<Item>& items, int rounds) {
  const Decoder decoder;
  std::vector<double> plain_ms;
  std::vector<double> fused_ms;
  std::size_t checksum = 0;
  for (int round = 0; round < rounds; ++round) {
    auto start = Clock::now();
    for (const Item& item : items) {
      const cv::Mat full = decoder.decode(item.sample).pixels;
      checksum += resize_pixels(full(item.region.crop), item.region.out, Interpolation::bilinear).data[0];
    }
    plain_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count() / items.size());
    start = Clock::now();
    for (const Item& item : items) checksum += decoder.decode(item.sample, item.region).pixels.data[0];
    fused_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count() / items.size());
  }
  const double plain = median(plain_ms);
  const double fused = median(fused_ms);
  std::printf("%-34s plain %7.3f ms/image   fused %7.3f ms/image   speed-up x%.2f   (checksum %zu)\n", label, plain,
              fused, plain / fused, checksum % 10);
}

}  // namespace

int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : "/work/shared/data/photos";
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".jpg") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) {
    std::fprintf(stderr, "decode_fused_bench: no .jpg files in %s\n", dir.c_str());
    return 1;
  }
  const Decoder decoder;
  const cv::Size out(224, 224);
  std::vector<Item> corpus;
  std::vector<Item> all_photos;
  std::uint64_t index = 0;
  for (const auto& path : paths) {
    Sample sample;
    sample.bytes = Bytes(read_file(path.string()));
    sample.name = path.filename().string();
    const cv::Mat full = decoder.decode(sample).pixels;
    std::vector<Item> items;
    ItemRng rng(1, 0, index++);
    for (int i = 0; i < 16; ++i) items.push_back({sample, Region{random_resized_crop(full.size(), rng), out}});
    run(sample.name.c_str(), items, rounds);
    all_photos.insert(all_photos.end(), items.begin(), items.end());
    // ImageNet-like images from this photo: random crops resized to about 500x375, quality 90.
    for (int i = 0; i < 64 / static_cast<int>(paths.size()) + 1 && corpus.size() < 64; ++i) {
      const cv::Rect crop = random_resized_crop(full.size(), rng);
      const bool portrait = rng.bernoulli(0.25);
      const cv::Mat resized =
          resize_pixels(full(crop), portrait ? cv::Size(375, 500) : cv::Size(500, 375), Interpolation::bilinear);
      Sample small;
      small.bytes = Bytes(encode_jpeg(resized, 90));
      small.name = sample.name + "#" + std::to_string(i);
      corpus.push_back({small, Region{random_resized_crop(resized.size(), rng), out}});
    }
  }
  run("all photos", all_photos, rounds);
  run("imagenet-like (64 x ~500x375 q90)", corpus, rounds);
  return 0;
}
