// `stoke pack`: an image folder (or a file list) -> one packed shard (X.stoke + X.stoke.idx), or
// WebDataset tar shards (--format tar), by nodes::pack_dataset; this file parses the options and
// prints.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <stoke/base/byte_size.hpp>
#include <stoke/graph/signal.hpp>
#include <stoke/nodes/file_list.hpp>
#include <stoke/nodes/image_folder.hpp>
#include <stoke/nodes/pack_dataset.hpp>
#include <stoke/nodes/tar_writer.hpp>
#include <stoke/train/input.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "commands.hpp"
#include "status_line.hpp"

namespace stoke::app {
namespace {

namespace fs = std::filesystem;
namespace po = boost::program_options;

struct PackConfig {
  std::string data;
  std::string list;
  std::string out;
  std::string format = "stoke";
  std::string shard_bytes = "0";
  std::int64_t shard_items = 0;
  bool no_index = false;
  int resize = 0;
  int quality = 90;
  std::string on_error = "skip";
  int threads = 0;
  bool verbose = false;
  bool json = false;
};

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

/// The usage error in the tar options, "" when there is none.
std::string tar_options_error(const PackConfig& c, const po::variables_map& values, nodes::TarWriterOptions& tar) {
  const bool tar_format = c.format == "tar";
  for (const char* option : {"shard-bytes", "shard-items", "no-index"}) {
    if (!tar_format && !values[option].defaulted()) return std::string("--") + option + " needs --format tar";
  }
  if (!tar_format) {
    if (c.out.ends_with(".tar")) {
      return "--out " + c.out + " names a tar file, but the format is " + c.format + ": add --format tar";
    }
    return "";
  }
  const std::optional<std::uint64_t> bytes = base::parse_byte_size(c.shard_bytes);
  if (!bytes) return "--shard-bytes must be a size such as 500M or 1G, or 0 for no limit (got '" + c.shard_bytes + "')";
  if (c.shard_items < 0) return "--shard-items must be 0 (no limit) or more";
  tar.shard_bytes = *bytes;
  tar.shard_samples = static_cast<std::size_t>(c.shard_items);
  tar.write_index = !c.no_index;
  try {
    const nodes::TarShardPattern pattern(c.out);
    if (!pattern.numbered() && (tar.shard_bytes > 0 || tar.shard_samples > 0)) {
      return "--shard-bytes and --shard-items need a numbered --out, e.g. shards/train-%06d.tar (got '" + c.out + "')";
    }
  } catch (const std::invalid_argument& error) {
    return std::string("--out: ") + error.what();
  }
  return "";
}

nlohmann::ordered_json to_json(const PackConfig& c, const nodes::PackReport& r, std::size_t classes) {
  nlohmann::ordered_json failed = nlohmann::ordered_json::array();
  for (const auto& f : r.failed) failed.push_back({{"path", f.path}, {"reason", f.reason}});
  if (c.format == "tar") {
    nlohmann::ordered_json shards = nlohmann::ordered_json::array();
    std::size_t items = 0;
    std::uint64_t bytes = 0;
    for (const auto& s : r.shards) {
      shards.push_back(
          {{"path", s.path.string()}, {"index", s.index.string()}, {"items", s.samples}, {"bytes", s.bytes}});
      items += s.samples;
      bytes += s.bytes;
    }
    nlohmann::ordered_json stale = nlohmann::ordered_json::array();
    for (const auto& path : r.stale_shards) stale.push_back(path.string());
    return {{"command", "pack"},    {"format", "tar"},
            {"shards", shards},     {"items", items},
            {"data_bytes", bytes},  {"classes", classes},
            {"resize", c.resize},   {"resized", r.resized},
            {"failed", failed},     {"ignored", r.ignored.size()},
            {"stale_shards", stale}};
  }
  return {{"command", "pack"},
          {"format", "stoke"},
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

constexpr const char* pack_summary =
    "Packs an image folder (one subfolder per class), or the files of a list, into one data file\n"
    "plus an index (OUT and OUT.idx), which stoke then reads with a few large sequential reads.\n"
    "Files are stored as they are, or with --resize decoded, shrunk so that their shorter side is\n"
    "N pixels (never enlarged) and re-encoded as JPEG. The output is written under a temporary\n"
    "name and renamed at the end: an interrupted pack leaves nothing under OUT.\n\n"
    "With --format tar, into WebDataset tar shards instead, which stoke (and WebDataset) read in\n"
    "place: OUT is a pattern with a zero-padded number (shards/train-%06d.tar), or one FILE.tar.\n"
    "Each sample is <key>.<ext> (the file, or .jpg when re-encoded), <key>.cls (its label) when\n"
    "labelled, <key>.mask.<ext> and <key>.json (its targets) when it has them; keys are the\n"
    "samples' positions, 000000, 000001, ... (class names are not stored: a label is its class's\n"
    "number). Each shard appears whole when finished, with its index (X.tar.stoke-idx); an\n"
    "interrupted pack removes the shards it wrote.\n\n"
    "  stoke pack --data photos --out photos.stoke --resize 256\n"
    "  stoke pack --data photos --out shards/train-%06d.tar --format tar --shard-bytes 1G";

void add_options(CommandOptions& cli, PackConfig& c) {
  cli.add()("data", po::value(&c.data), "the image folder (with --list: the folder the list's paths are relative to)")(
      "list", po::value(&c.list), "a text/CSV file of path,label lines to pack instead of the folder's classes")(
      "out", po::value(&c.out)->required(),
      "the pack to write: FILE and FILE.idx (e.g. train.stoke); with --format tar, the shards "
      "(e.g. shards/train-%06d.tar, or one train.tar)")(
      "format", po::value(&c.format)->default_value(c.format),
      "what to write: stoke (one pack, OUT and OUT.idx) or tar (WebDataset tar shards)")(
      "shard-bytes", po::value(&c.shard_bytes)->default_value(c.shard_bytes),
      "tar: start a new shard before one would grow past SIZE (e.g. 1G; K M G T are powers of 1024, "
      "KB MB GB TB of 1000; 0: no limit)")("shard-items", po::value(&c.shard_items)->default_value(c.shard_items),
                                           "tar: at most N items per shard (0: no limit)")(
      "no-index", po::bool_switch(&c.no_index), "tar: do not index each shard as it is finished")(
      "resize", po::value(&c.resize)->default_value(c.resize),
      "shrink each image's shorter side to N pixels (0: keep files)")(
      "quality", po::value(&c.quality)->default_value(c.quality),
      "JPEG quality of re-encoded images (1..100; with --resize)")(
      "on-error", po::value(&c.on_error)->default_value(c.on_error),
      "a file that cannot be read or decoded: skip (list it at the end) or fail (write nothing)")(
      "threads", po::value(&c.threads)->default_value(c.threads), "reader threads (0: one per core)")(
      "verbose", po::bool_switch(&c.verbose), "list every skipped file, not just the first 20")(
      "json", po::bool_switch(&c.json), "end with one JSON line describing the pack");
}

// A usage mistake the parser cannot see, or "" when there is none; fills `tar`.
std::string check(const PackConfig& c, const po::variables_map& values, nodes::TarWriterOptions& tar) {
  if (c.data.empty() && c.list.empty()) return "give --data DIR (or --list FILE)";
  if (c.resize < 0) return "--resize must be 0 (keep files) or a positive number of pixels";
  if (c.quality < 1 || c.quality > 100) return "--quality must be in 1..100";
  if (!values["quality"].defaulted() && c.resize == 0) return "--quality needs --resize";
  if (std::string mistake = choice_error("on-error", c.on_error, {"skip", "fail"}); !mistake.empty()) return mistake;
  if (c.threads < 0) return "--threads must be 0 (one per core) or more";
  if (std::string mistake = choice_error("format", c.format, {"stoke", "tar"}); !mistake.empty()) return mistake;
  return tar_options_error(c, values, tar);
}

// What to pack: the list's files, or the folder's classes; and the folder their paths start from.
std::pair<std::shared_ptr<const nodes::Dataset>, fs::path> open_source(const PackConfig& c) {
  if (!c.list.empty()) {
    auto list = std::make_shared<const nodes::FileList>(c.list, c.data);
    fs::path root = list->root();
    return {std::move(list), std::move(root)};
  }
  auto folder = std::make_shared<const nodes::ImageFolder>(c.data);
  fs::path root = folder->root();
  return {std::move(folder), std::move(root)};
}

// The shards written, and which label number is which class (tar shards keep labels only).
// Returns the items written.
std::size_t print_tar_result(const PackConfig& c, const nodes::PackReport& report,
                             const std::vector<std::string>& classes) {
  std::size_t items = 0;
  std::uint64_t shard_bytes = 0;
  for (const nodes::TarShardSummary& shard : report.shards) {
    items += shard.samples;
    shard_bytes += shard.bytes;
  }
  const auto& shards = report.shards;
  const bool indexed = !shards.front().index.empty();
  std::printf("wrote %zu tar shard%s (%zu items, %s): %s%s%s%s, in %.1f s\n", shards.size(),
              shards.size() == 1 ? "" : "s", items, base::byte_size_text(shard_bytes).c_str(),
              shards.front().path.c_str(), shards.size() > 1 ? " .. " : "",
              shards.size() > 1 ? shards.back().path.c_str() : "", indexed ? ", each with its index (.stoke-idx)" : "",
              report.seconds);
  if (c.verbose || shards.size() <= 10) {
    for (const nodes::TarShardSummary& shard : shards) {
      std::printf("  %s: %zu items, %s\n", shard.path.c_str(), shard.samples,
                  base::byte_size_text(shard.bytes).c_str());
    }
  }
  std::string about = "classes: " + std::to_string(classes.size());
  for (std::size_t i = 0; i < classes.size() && i < 5; ++i) {
    about +=
        (i == 0 ? " (labels are class numbers; names are not stored: " : ", ") + std::to_string(i) + " " + classes[i];
  }
  if (!classes.empty()) about += classes.size() > 5 ? ", ...)" : ")";
  std::printf("%s\n", about.c_str());
  if (const auto& stale = report.stale_shards; !stale.empty()) {
    std::string more = stale.size() > 1 ? " and " + std::to_string(stale.size() - 1) + " more after it" : "";
    std::printf("warning: %s%s, left by an earlier pack, would be read with these shards: remove %s\n",
                stale.front().c_str(), more.c_str(), stale.size() > 1 ? "them" : "it");
  }
  return items;
}

}  // namespace

int pack(int argc, char** argv) {
  PackConfig c;
  CommandOptions cli("pack", pack_summary, "--data DIR --out FILE [options]");
  add_options(cli, c);
  po::variables_map values;
  if (auto exit_code = cli.parse(argc, argv, values)) return *exit_code;
  nodes::TarWriterOptions tar;
  if (const std::string mistake = check(c, values, tar); !mistake.empty()) return cli.usage_error(mistake);

  const auto [dataset, root] = open_source(c);
  const std::size_t total = dataset->size();
  if (total == 0)
    throw std::runtime_error("nothing to pack: " + (c.list.empty() ? c.data : c.list) + " lists no files");
  const nodes::PackOptions options{.resize = c.resize,
                                   .quality = c.quality,
                                   .on_error = c.on_error == "fail" ? graph::OnError::fail : graph::OnError::skip,
                                   .threads = c.threads,
                                   .root = root,
                                   .decode = train::default_decode_options(),
                                   .stop_on_signal = true,
                                   .format = c.format == "tar" ? nodes::PackFormat::tar : nodes::PackFormat::stoke,
                                   .tar = tar};
  // The folder --out names is made when it is missing (shards/train-%06d.tar into a new shards/).
  if (const fs::path folder = fs::path(c.out).parent_path(); !folder.empty()) {
    std::error_code error;
    fs::create_directories(folder, error);
    if (error) throw std::runtime_error("cannot make the folder " + folder.string() + " for --out: " + error.message());
  }
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

  std::size_t items = report.summary.items;
  if (c.format == "tar") {
    items = print_tar_result(c, report, dataset->classes());
  } else {
    const nodes::PackSummary& summary = report.summary;
    std::printf("wrote %s (%zu items, %s) and %s (%s) in %.1f s\n", summary.data.c_str(), summary.items,
                base::byte_size_text(summary.data_bytes).c_str(), summary.index.c_str(),
                base::byte_size_text(summary.index_bytes).c_str(), report.seconds);
    std::printf("classes: %zu\n", dataset->classes().size());
  }
  if (c.resize > 0) {
    std::printf("resized: %zu re-encoded with shorter side at most %d (JPEG quality %d), %zu kept as they were\n",
                report.resized, c.resize, c.quality, items - report.resized);
  }
  print_skipped("skipped, could not be read or decoded", report.failed, c.verbose);
  print_skipped("skipped, not part of the dataset", report.ignored, c.verbose);
  if (c.json) print_json(to_json(c, report, dataset->classes().size()));
  return 0;
}

}  // namespace stoke::app
