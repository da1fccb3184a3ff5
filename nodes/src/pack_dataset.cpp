#include "stoke/nodes/pack_dataset.hpp"

#include <algorithm>
#include <chrono>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>

#include "stoke/graph/pipeline.hpp"
#include "stoke/nodes/jpeg_encode.hpp"
#include "stoke/nodes/tar_writer.hpp"

namespace stoke::nodes {
namespace {

namespace fs = std::filesystem;

/// One item on its way to the pack.
struct Item {
  Bytes bytes;
  int label = -1;
  std::string name;
  bool resized = false;
  std::vector<TarMember> members;  // PackFormat::tar: what the shard gets
};

/// The name stored in the pack: the path relative to `root` when it lies inside it, else the
/// path as the dataset gives it.
std::string pack_name(const fs::path& path, const fs::path& root) {
  if (root.empty()) return path.generic_string();
  const fs::path relative = path.lexically_relative(root);
  if (relative.empty() || *relative.begin() == "..") return path.generic_string();
  return relative.generic_string();
}

/// Decodes, shrinks the shorter side to `side` (never enlarges) and re-encodes as JPEG. A JPEG that
/// needs neither shrinking nor turning upright is kept byte for byte.
class Shrink {
 public:
  Shrink(int side, int quality, DecodeOptions decode)
      : decoder_(upright(std::move(decode))), side_(side), quality_(quality) {}

  void operator()(const Sample& sample, Item& item) const {
    const ImageInfo info = decoder_.probe(sample);
    if (info.format == ImageFormat::jpeg && info.orientation == 1 && std::min(info.width, info.height) <= side_) return;
    const Image image = decoder_.decode(sample);
    cv::Mat pixels = image.pixels;
    const int width = image.width(), height = image.height();
    if (std::min(width, height) > side_) {
      // torchvision's Resize(N): the shorter side becomes N, the longer keeps the aspect ratio.
      const cv::Size size = width <= height ? cv::Size(side_, static_cast<int>(std::int64_t{side_} * height / width))
                                            : cv::Size(static_cast<int>(std::int64_t{side_} * width / height), side_);
      cv::Mat shrunk;
      cv::resize(pixels, shrunk, size, 0, 0, cv::INTER_AREA);
      pixels = shrunk;
    }
    item.bytes = Bytes(encode_jpeg(pixels, quality_));
    item.resized = true;
  }

 private:
  // Pixels are stored upright: a re-encoded JPEG carries no EXIF orientation tag.
  static DecodeOptions upright(DecodeOptions options) {
    options.exif_orientation = true;
    return options;
  }

  Decoder decoder_;
  int side_;
  int quality_;
};

void check(const Dataset& dataset, const PackOptions& options) {
  if (dataset.size() == 0) throw std::invalid_argument("pack_dataset: nothing to pack: the dataset is empty");
  if (options.resize < 0) throw std::invalid_argument("pack_dataset: resize must be 0 (keep files) or positive");
  if (options.quality < 1 || options.quality > 100)
    throw std::invalid_argument("pack_dataset: quality must be in 1..100");
  if (options.threads < 0) throw std::invalid_argument("pack_dataset: threads must be 0 (one per core) or more");
  if (options.format == PackFormat::stoke &&
      (options.tar.shard_bytes != 0 || options.tar.shard_samples != 0 || !options.tar.write_index)) {
    throw std::invalid_argument("pack_dataset: tar options (shard limits, write_index) need PackFormat::tar");
  }
}

/// The stage body that reads item i for a .stoke pack.
Item read_for_stoke(const Dataset& dataset, std::size_t i, const std::optional<Shrink>& shrink, const fs::path& root) {
  Sample sample = dataset.read(i);
  // A pack holds image bytes and labels: a mask or targets would be lost without a word.
  if (!sample.mask.empty() || !sample.targets.empty()) {
    throw std::invalid_argument(dataset.name(i) + ": carries " +
                                (sample.mask.empty() ? std::string("targets") : std::string("a mask")) +
                                ", which packs do not hold (image bytes and labels only); read the "
                                "dataset where it is, or pack it as tar shards (`stoke pack --format tar`)");
  }
  Item item{sample.bytes, sample.label, pack_name(dataset.name(i), root), false, {}};
  if (shrink) (*shrink)(sample, item);
  return item;
}

/// The stage body that reads item i for tar shards: its members, ready to write.
Item read_for_tar(const Dataset& dataset, std::size_t i, const std::optional<Shrink>& shrink) {
  Sample sample = dataset.read(i);
  if (shrink && !sample.mask.empty()) {
    throw std::invalid_argument(dataset.name(i) +
                                ": has a mask, which would no longer match a resized image; pack it without --resize");
  }
  Item item{sample.bytes, sample.label, {}, false, {}};
  if (shrink) (*shrink)(sample, item);
  if (item.resized) {
    sample.bytes = item.bytes;
    sample.encoding = Encoding::encoded;
  }
  item.members = tar_members(sample, item.resized ? "jpg" : "");
  return item;
}

/// Files the pattern names after shard `count - 1` that exist (from an earlier, larger pack).
std::vector<fs::path> stale_shards(const TarShardPattern& pattern, std::size_t count) {
  std::vector<fs::path> stale;
  if (!pattern.numbered()) return stale;
  for (std::size_t n = count;; ++n) {
    fs::path path;
    try {
      path = pattern.path(n);
    } catch (const std::invalid_argument&) {
      break;  // past the pattern's digits
    }
    std::error_code error;
    if (!fs::exists(path, error)) break;
    stale.push_back(std::move(path));
  }
  return stale;
}

/// report.skipped_items named by the dataset; a reason that starts with the path ("a.jpg: cannot
/// open: ...") loses it, so it is not said twice.
std::vector<PackFailure> failures(const graph::RunReport& report, const Dataset& dataset) {
  std::vector<PackFailure> failed;
  for (const graph::SkippedItem& skip : report.skipped_items) {
    std::string path = dataset.name(static_cast<std::size_t>(skip.index));
    std::string reason = skip.reason.starts_with(path + ": ") ? skip.reason.substr(path.size() + 2) : skip.reason;
    failed.push_back({std::move(path), std::move(reason)});
  }
  return failed;
}

}  // namespace

PackReport pack_dataset(const Dataset& dataset, const fs::path& out, const PackOptions& options,
                        const PackProgress& progress) {
  check(dataset, options);
  const auto begin = std::chrono::steady_clock::now();
  const std::size_t total = dataset.size();
  const int threads =
      options.threads > 0 ? options.threads : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  std::optional<Shrink> shrink;
  if (options.resize > 0) shrink.emplace(options.resize, options.quality, options.decode);

  const bool tar = options.format == PackFormat::tar;
  std::optional<TarShardPattern> pattern;
  std::optional<PackWriter> pack;
  std::optional<TarWriter> shards;
  if (tar) {
    pattern.emplace(out.string());
    shards.emplace(*pattern, options.tar);
  } else {
    pack.emplace(out, dataset.classes(), static_cast<std::uint32_t>(options.resize));
  }
  const auto written = [&] { return tar ? shards->samples() : pack->items(); };

  PackReport result;
  graph::Pipeline pipe({.max_in_flight = static_cast<std::size_t>(4 * threads) + 4,
                        .threads = threads + 1,
                        .stop_on_signal = options.stop_on_signal,
                        .max_listed_skips = total});
  pipe.source("items",
              [i = std::size_t{0}, total]() mutable -> std::optional<std::size_t> {
                return i < total ? std::optional(i++) : std::nullopt;
              })
      .map("read",
           [&](std::size_t i) {
             return tar ? read_for_tar(dataset, i, shrink) : read_for_stoke(dataset, i, shrink, options.root);
           },
           {.concurrency = graph::parallel(threads), .ordered = true, .on_error = options.on_error})
      .sink("write",
            [&](Item item) {
              if (tar) {
                shards->add(tar_key(shards->samples(), total), item.members);
              } else {
                pack->add(item.bytes.span(), item.label, item.name);
              }
              result.resized += item.resized ? 1 : 0;
              if (progress) progress(written(), total, tar ? shards->bytes() : pack->data_bytes());
            },
            {.ordered = true});
  const graph::RunReport report = pipe.run();

  result.interrupted = report.stopped || report.cancelled;
  result.failed = failures(report, dataset);
  result.ignored = dataset.ignored();
  if (!result.interrupted && written() > 0) {
    if (tar) {
      result.shards = shards->finish();
      result.stale_shards = stale_shards(*pattern, result.shards.size());
    } else {
      result.summary = pack->finish();
    }
    result.written = true;
  }  // else the writer's destructor removes what it wrote
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  return result;
}

}  // namespace stoke::nodes
