// `stoke pack`: an image folder (or a file list) -> one packed shard (X.stoke + X.stoke.idx), read
// in parallel and written in item order, so that the same input always gives the same pack.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <opencv2/imgproc.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// GCC 12 reports a false null dereference inside Boost.Program_options' typed_value<std::string>.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include "cli.hpp"
#pragma GCC diagnostic pop
#include "commands.hpp"
#include "json.hpp"
#include "stoke/graph/pipeline.hpp"
#include "stoke/graph/signal.hpp"
#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/file_list.hpp"
#include "stoke/nodes/image_folder.hpp"
#include "stoke/nodes/jpeg_encode.hpp"
#include "stoke/nodes/packed.hpp"
// Non-JPEG input for --resize, when the executable is linked with the optional stoke::imgcodecs.
#if __has_include("stoke/nodes/opencv_codec.hpp")
#include "stoke/nodes/opencv_codec.hpp"
#define STOKE_PACK_OTHER_FORMATS 1
#endif

namespace stoke::app {
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

struct Config {
  std::string data;
  std::string list;
  std::string out;
  int resize = 0;
  int quality = 90;
  std::string on_error = "skip";
  int threads = 0;
  bool verbose = false;
  bool json = false;
};

/// One item on its way to the pack.
struct Item {
  nodes::Bytes bytes;
  int label = -1;
  std::string name;
  bool resized = false;
};

/// The name stored in the pack: the path relative to the packed folder when it lies inside it
/// (portable: the pack can move), else the path as listed.
std::string pack_name(const fs::path& path, const fs::path& root) {
  const fs::path relative = path.lexically_relative(root);
  if (relative.empty() || *relative.begin() == "..") return path.generic_string();
  return relative.generic_string();
}

/// --resize N: decodes, shrinks the shorter side to N (never enlarges) and re-encodes as JPEG.
/// A JPEG that needs neither shrinking nor turning upright is kept byte for byte.
class Shrink {
 public:
  Shrink(int shorter_side, int quality) : decoder_(upright()), side_(shorter_side), quality_(quality) {}

  void operator()(const nodes::Sample& sample, Item& item) const {
    const nodes::ImageInfo info = decoder_.probe(sample);
    const int shorter = std::min(info.width, info.height);
    if (info.format == nodes::ImageFormat::jpeg && info.orientation == 1 && shorter <= side_) return;
    const nodes::Image image = decoder_.decode(sample);
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
    item.bytes = nodes::Bytes(nodes::encode_jpeg(pixels, quality_));
    item.resized = true;
  }

 private:
  // Pixels are stored upright: a re-encoded JPEG carries no EXIF orientation tag.
  static nodes::DecodeOptions upright() {
    nodes::DecodeOptions options;
    options.exif_orientation = true;
#ifdef STOKE_PACK_OTHER_FORMATS
    options.other_formats = nodes::opencv_codec();
#endif
    return options;
  }

  nodes::Decoder decoder_;
  int side_;
  int quality_;
};

/// Progress on stderr: rewritten in place on a terminal, a line every few seconds otherwise.
class Progress {
 public:
  explicit Progress(std::size_t total) : total_(total), tty_(::isatty(STDERR_FILENO) != 0) {}

  void update(std::size_t done, std::uint64_t bytes, bool last = false) {
    const auto now = Clock::now();
    if (!last && now - shown_ < (tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(5000))) return;
    shown_ = now;
    const double seconds = std::max(1e-9, std::chrono::duration<double>(now - begin_).count());
    const double rate = static_cast<double>(done) / seconds;
    const double left = rate > 0 ? static_cast<double>(total_ - std::min(done, total_)) / rate : 0;
    std::fprintf(stderr, "%spack: %zu/%zu items (%.0f%%), %.0f items/s, %.1f MB, ETA %.0f s%s", tty_ ? "\r" : "", done,
                 total_, total_ ? 100.0 * static_cast<double>(done) / static_cast<double>(total_) : 100.0, rate,
                 static_cast<double>(bytes) / 1e6, left, tty_ && !last ? "   " : "\n");
    std::fflush(stderr);
  }

  /// Ends a line left open on a terminal (before an error message).
  void interrupt() const {
    if (tty_ && shown_ != Clock::time_point{}) std::fputc('\n', stderr);
  }

  double seconds() const { return std::chrono::duration<double>(Clock::now() - begin_).count(); }

 private:
  std::size_t total_;
  bool tty_;
  Clock::time_point begin_ = Clock::now();
  Clock::time_point shown_{};
};

/// "532 bytes", "20.6 KB", "1.1 MB", "3.2 GB".
std::string human_bytes(std::uint64_t bytes) {
  if (bytes < 1000) return std::to_string(bytes) + " bytes";
  const char* units[] = {"KB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes) / 1e3;
  int unit = 0;
  while (value >= 1000 && unit < 3) {
    value /= 1e3;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

struct Skipped {
  std::string path;
  std::string reason;
};

/// Prints a list of skipped files under `title`; all of them with --verbose, else the first 20.
void print_skipped(const char* title, const std::vector<Skipped>& files, bool verbose) {
  if (files.empty()) return;
  std::printf("%s: %zu\n", title, files.size());
  const std::size_t shown = verbose ? files.size() : std::min<std::size_t>(files.size(), 20);
  for (std::size_t i = 0; i < shown; ++i) std::printf("  %s: %s\n", files[i].path.c_str(), files[i].reason.c_str());
  if (shown < files.size()) std::printf("  ... and %zu more (--verbose lists them all)\n", files.size() - shown);
}

}  // namespace

int pack(int argc, char** argv) {
  Config c;
  CommandOptions cli("pack",
                     "Packs an image folder (one subfolder per class), or the files of a list, into one data file\n"
                     "plus an index (OUT and OUT.idx), which stoke then reads with a few large sequential reads.\n"
                     "Files are stored as they are, or with --resize decoded, shrunk so that their shorter side is\n"
                     "N pixels (never enlarged) and re-encoded as JPEG. The output is written under a temporary\n"
                     "name and renamed at the end: an interrupted pack leaves nothing under OUT.",
                     "--data DIR --out FILE [options]");
  cli.add()("data", po::value(&c.data), "the image folder (with --list: the folder the list's paths are relative to)")(
      "list", po::value(&c.list), "a text/CSV file of path,label lines to pack instead of the folder's classes")(
      "out", po::value(&c.out)->required(), "the pack to write: FILE and FILE.idx (e.g. train.stoke)")(
      "resize", po::value(&c.resize)->default_value(c.resize),
      "shrink each image's shorter side to N pixels (0: keep files)")(
      "quality", po::value(&c.quality)->default_value(c.quality),
      "JPEG quality of re-encoded images (1..100; with --resize)")(
      "on-error", po::value(&c.on_error)->default_value(c.on_error),
      "a file that cannot be read or decoded: skip (list it at the end) or fail (write nothing)")(
      "threads", po::value(&c.threads)->default_value(c.threads), "reader threads (0: one per core)")(
      "verbose", po::bool_switch(&c.verbose), "list every skipped file, not just the first 20")(
      "json", po::bool_switch(&c.json), "end with one JSON line describing the pack");
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  if (c.data.empty() && c.list.empty()) return cli.usage_error("give --data DIR (or --list FILE)");
  if (c.resize < 0) return cli.usage_error("--resize must be 0 (keep files) or a positive number of pixels");
  if (c.quality < 1 || c.quality > 100) return cli.usage_error("--quality must be in 1..100");
  if (!values["quality"].defaulted() && c.resize == 0) return cli.usage_error("--quality needs --resize");
  if (c.on_error != "skip" && c.on_error != "fail") return cli.usage_error("--on-error must be skip or fail");
  if (c.threads < 0) return cli.usage_error("--threads must be 0 (one per core) or more");

  std::shared_ptr<const nodes::Dataset> dataset;
  fs::path root;
  if (!c.list.empty()) {
    auto list = std::make_shared<const nodes::FileList>(c.list, c.data);
    root = list->root();
    dataset = std::move(list);
  } else {
    auto folder = std::make_shared<const nodes::ImageFolder>(c.data);
    root = folder->root();
    dataset = std::move(folder);
  }
  const std::size_t total = dataset->size();
  if (total == 0)
    throw std::runtime_error("nothing to pack: " + (c.list.empty() ? c.data : c.list) + " lists no files");

  const int threads = c.threads > 0 ? c.threads : static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  std::optional<Shrink> shrink;
  if (c.resize > 0) shrink.emplace(c.resize, c.quality);

  nodes::PackWriter writer(c.out, dataset->classes(), static_cast<std::uint32_t>(c.resize));
  Progress progress(total);
  std::size_t resized = 0;

  const graph::SignalStop signals;  // Ctrl-C stops the run; the writer then removes its files
  graph::Pipeline pipe({.max_in_flight = static_cast<std::size_t>(4 * threads) + 4,
                        .threads = threads + 1,
                        .stop_on_signal = true,
                        .max_listed_skips = total});
  pipe.source("items",
              [i = std::size_t{0}, total]() mutable -> std::optional<std::size_t> {
                return i < total ? std::optional(i++) : std::nullopt;
              })
      .map("read",
           [&dataset, &shrink, &root](std::size_t i) {
             nodes::Sample sample = dataset->read(i);
             Item item{sample.bytes, sample.label, pack_name(dataset->name(i), root), false};
             if (shrink) (*shrink)(sample, item);
             return item;
           },
           {.concurrency = graph::parallel(threads),
            .ordered = true,
            .on_error = c.on_error == "fail" ? graph::OnError::fail : graph::OnError::skip})
      .sink("write",
            [&](Item item) {
              writer.add(item.bytes.span(), item.label, item.name);
              resized += item.resized ? 1 : 0;
              progress.update(writer.items(), writer.data_bytes());
            },
            {.ordered = true});
  graph::RunReport report;
  try {
    report = pipe.run();
  } catch (...) {
    progress.interrupt();
    throw;
  }
  progress.update(writer.items(), writer.data_bytes(), /*last=*/true);
  if (report.stopped || report.cancelled) {
    std::cerr << "stoke pack: interrupted; nothing was written to " << c.out << '\n';
    return 1;
  }

  std::vector<Skipped> failed;
  for (const graph::SkippedItem& skip : report.skipped_items) {
    std::string path = dataset->name(static_cast<std::size_t>(skip.index));
    // Most reasons already start with the path ("a.jpg: cannot open: ..."): no need to say it twice.
    std::string reason = skip.reason.starts_with(path + ": ") ? skip.reason.substr(path.size() + 2) : skip.reason;
    failed.push_back({std::move(path), std::move(reason)});
  }
  if (writer.items() == 0) {
    print_skipped("could not be read", failed, c.verbose);
    throw std::runtime_error("none of the " + std::to_string(total) + " files could be packed; nothing was written");
  }
  const nodes::PackSummary summary = writer.finish();

  std::vector<Skipped> ignored;
  for (const nodes::IgnoredFile& file : dataset->ignored()) ignored.push_back({file.path, file.reason});

  std::printf("wrote %s (%zu items, %s) and %s (%s) in %.1f s\n", summary.data.c_str(), summary.items,
              human_bytes(summary.data_bytes).c_str(), summary.index.c_str(), human_bytes(summary.index_bytes).c_str(),
              progress.seconds());
  std::printf("classes: %zu\n", dataset->classes().size());
  if (c.resize > 0) {
    std::printf("resized: %zu re-encoded with shorter side at most %d (JPEG quality %d), %zu kept as they were\n",
                resized, c.resize, c.quality, summary.items - resized);
  }
  print_skipped("skipped, could not be read or decoded", failed, c.verbose);
  print_skipped("skipped, not part of the dataset", ignored, c.verbose);

  if (c.json) {
    using U = std::uint64_t;
    Json j;
    j.field("command", "pack");
    j.field("data", summary.data.string());
    j.field("index", summary.index.string());
    j.field("items", static_cast<U>(summary.items));
    j.field("data_bytes", static_cast<U>(summary.data_bytes));
    j.field("index_bytes", static_cast<U>(summary.index_bytes));
    j.field("classes", static_cast<U>(dataset->classes().size()));
    j.field("resize", static_cast<U>(c.resize));
    j.field("resized", static_cast<U>(resized));
    j.begin_array("failed");
    for (const auto& f : failed) {
      j.begin_object();
      j.field("path", f.path);
      j.field("reason", f.reason);
      j.end_object();
    }
    j.end_array();
    j.field("ignored", static_cast<U>(ignored.size()));
    std::printf("%s\n", j.str().c_str());
  }
  return 0;
}

}  // namespace stoke::app
