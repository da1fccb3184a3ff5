// Packing a whole dataset into one packed shard (packed.hpp's format): the items are read in
// parallel, optionally shrunk and re-encoded as JPEG, and written in item order, so that the same
// dataset and options always give the same pack whatever the thread count. `stoke pack` is this
// call plus option parsing and printing.
//
//   nodes::ImageFolder folder("photos");
//   nodes::PackReport report = nodes::pack_dataset(folder, "photos.stoke", {.resize = 256, .root = folder.root()});
//   for (const nodes::PackFailure& f : report.failed) std::cerr << f.path << ": " << f.reason << '\n';
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "stoke/graph/options.hpp"
#include "stoke/nodes/dataset.hpp"
#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/packed.hpp"

namespace stoke::nodes {

/// How pack_dataset() packs.
struct PackOptions {
  /// Shrink each image so that its shorter side is at most this many pixels (never enlarged) and
  /// re-encode it as JPEG; a JPEG already small enough and upright is kept byte for byte. 0: every
  /// item's bytes are stored as read. Recorded in the pack (PackedDataset::resize()).
  int resize = 0;
  /// JPEG quality (1..100) of the re-encoded images (with `resize` only).
  int quality = 90;
  /// An item that cannot be read (or, with `resize`, decoded): skip it and list it in
  /// PackReport::failed, or fail (the call throws graph::StageError naming the item, and nothing
  /// is written).
  graph::OnError on_error = graph::OnError::skip;
  /// Reader threads; 0: one per core.
  int threads = 0;
  /// Names are stored relative to this folder when they lie inside it (so the pack can move),
  /// else as the dataset gives them. Empty: as the dataset gives them.
  std::filesystem::path root{};
  /// How images are decoded with `resize` (other_formats: PNG, WebP, ... through stoke::imgcodecs).
  /// EXIF orientation is always applied: a re-encoded JPEG is stored upright, without the tag.
  DecodeOptions decode{};
  /// Stop on SIGINT/SIGTERM (PipelineOptions::stop_on_signal; needs a live graph::SignalStop):
  /// the call then returns with `interrupted` set and nothing written.
  bool stop_on_signal = false;
};

/// An item that could not be packed: the dataset's name for it and why.
struct PackFailure {
  std::string path;
  std::string reason;  ///< the error, without a leading "<path>: "
};

/// What pack_dataset() did.
struct PackReport {
  /// The files written (empty paths and zero counts when nothing was written).
  PackSummary summary{};
  /// True when the pack was written: false after a stop (`interrupted`), or when no item could
  /// be packed (every item is in `failed`); nothing is left under the destination then.
  bool written = false;
  bool interrupted = false;
  std::size_t resized = 0;           ///< items re-encoded (with PackOptions::resize)
  std::vector<PackFailure> failed;   ///< skipped items, in item order
  std::vector<IgnoredFile> ignored;  ///< files the dataset left out (Dataset::ignored())
  double seconds = 0;                ///< wall time of the whole call
};

/// Called from the writing thread after each item written: items written so far, the dataset's
/// size, and bytes of the data file so far.
using PackProgress = std::function<void(std::size_t written, std::size_t total, std::uint64_t bytes)>;

/// Packs every item of `dataset` into `out` (X.stoke) and its index (X.stoke.idx), with the
/// dataset's classes, through a PackWriter (so an interrupted or failed call leaves nothing under
/// those names). Throws std::invalid_argument for an empty dataset or bad options (resize < 0,
/// quality outside 1..100, threads < 0), std::runtime_error naming the file when it cannot be
/// written, and graph::StageError with on_error = fail. `dataset` must stay alive during the call
/// and its read() must be thread-safe (Dataset's contract).
PackReport pack_dataset(const Dataset& dataset, const std::filesystem::path& out, const PackOptions& options = {},
                        const PackProgress& progress = {});

}  // namespace stoke::nodes
