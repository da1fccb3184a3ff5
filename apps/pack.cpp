// `stoke pack`: an image folder (or a file list) -> one packed shard (X.stoke + X.stoke.idx), by
// nodes::pack_dataset; this file parses the options and prints.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <stoke/graph/signal.hpp>
#include <stoke/nodes/file_list.hpp>
#include <stoke/nodes/image_folder.hpp>
#include <stoke/nodes/pack_dataset.hpp>
#include <stoke/train/input.hpp>
#include <string>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "status_line.hpp"

namespace stoke::app {
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;

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
  return format("%.1f %s", value, units[unit]);
}

/// Prints a list of skipped files (nodes::PackFailure or IgnoredFile) under `title`; all of them
/// with --verbose, else the first 20.
template <class File>
void print_skipped(const char* title, const std::vector<File>& files, bool verbose) {
  if (files.empty()) return;
  std::printf("%s: %zu\n", title, files.size());
  const std::size_t shown = verbose ? files.size() : std::min<std::size_t>(files.size(), 20);
  for (std::size_t i = 0; i < shown; ++i) std::printf("  %s: %s\n", files[i].path.c_str(), files[i].reason.c_str());
  if (shown < files.size()) std::printf("  ... and %zu more (--verbose lists them all)\n", files.size() - shown);
}

nlohmann::ordered_json to_json(const Config& c, const nodes::PackReport& r, std::size_t classes) {
  nlohmann::ordered_json failed = nlohmann::ordered_json::array();
  for (const auto& f : r.failed) failed.push_back({{"path", f.path}, {"reason", f.reason}});
  return {{"command", "pack"},
          {"data", r.summary.data.string()},
          {"index", r.summary.index.string()},
          {"items", r.summary.items},
          {"data_bytes", r.summary.data_bytes},
          {"index_bytes", r.summary.index_bytes},
          {"classes", classes},
          {"resize", c.resize},
          {"resized", r.resized},
          {"failed", failed},
          {"ignored", r.ignored.size()}};
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
  if (auto mistake = choice_error("on-error", c.on_error, {"skip", "fail"}); !mistake.empty()) {
    return cli.usage_error(mistake);
  }
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

  const nodes::PackOptions options{.resize = c.resize,
                                   .quality = c.quality,
                                   .on_error = c.on_error == "fail" ? graph::OnError::fail : graph::OnError::skip,
                                   .threads = c.threads,
                                   .root = root,
                                   .decode = train::default_decode_options(),
                                   .stop_on_signal = true};
  const Pace pace;
  StatusLine line(std::chrono::milliseconds(200), std::chrono::milliseconds(5000));
  std::size_t written = 0;
  std::uint64_t bytes = 0;
  const auto progress = [&] {
    return format("pack: %zu/%zu items (%.0f%%), %.0f items/s, %.1f MB, ETA %.0f s", written, total,
                  100.0 * static_cast<double>(written) / static_cast<double>(total), pace.rate(written),
                  static_cast<double>(bytes) / 1e6, pace.eta(written, total));
  };
  const graph::SignalStop signals;  // Ctrl-C stops the run; the writer then removes its files
  const nodes::PackReport report =
      nodes::pack_dataset(*dataset, c.out, options, [&](std::size_t done, std::size_t, std::uint64_t data_bytes) {
        written = done;
        bytes = data_bytes;
        line.show(progress);
      });
  line.finish(progress());
  if (report.interrupted) {
    std::cerr << "stoke pack: interrupted; nothing was written to " << c.out << '\n';
    return 1;
  }
  if (!report.written) {
    print_skipped("could not be read", report.failed, c.verbose);
    throw std::runtime_error("none of the " + std::to_string(total) + " files could be packed; nothing was written");
  }

  const nodes::PackSummary& summary = report.summary;
  std::printf("wrote %s (%zu items, %s) and %s (%s) in %.1f s\n", summary.data.c_str(), summary.items,
              human_bytes(summary.data_bytes).c_str(), summary.index.c_str(), human_bytes(summary.index_bytes).c_str(),
              report.seconds);
  std::printf("classes: %zu\n", dataset->classes().size());
  if (c.resize > 0) {
    std::printf("resized: %zu re-encoded with shorter side at most %d (JPEG quality %d), %zu kept as they were\n",
                report.resized, c.resize, c.quality, summary.items - report.resized);
  }
  print_skipped("skipped, could not be read or decoded", report.failed, c.verbose);
  print_skipped("skipped, not part of the dataset", report.ignored, c.verbose);
  if (c.json) print_json(to_json(c, report, dataset->classes().size()));
  return 0;
}

}  // namespace stoke::app
