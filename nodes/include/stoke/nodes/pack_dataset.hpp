// Packing a whole dataset into one packed shard (packed.hpp's format) or into WebDataset tar shards
// (tar_writer.hpp, read back by TarShards): the items are read in parallel, optionally shrunk and
// re-encoded as JPEG, and written in item order, so that the same dataset and options always give
// the same pack whatever the thread count. `stoke pack` is this call plus option parsing and
// printing.
//
//   nodes::ImageFolder folder("photos");
//   nodes::PackReport report = nodes::pack_dataset(folder, "photos.stoke", {.resize = 256, .root = folder.root()});
//   for (const nodes::PackFailure& f : report.failed) std::cerr << f.path << ": " << f.reason << '\n';
//
//   nodes::PackOptions tar{.format = nodes::PackFormat::tar, .tar = {.shard_bytes = 1ULL << 30}};
//   nodes::pack_dataset(folder, "shards/train-%06d.tar", tar);  // shards/train-000000.tar, ...
//
// Tar shards: sample keys are the samples' positions in the pack, "000000", "000001", ... (tar_key:
// zero-padded to 6 digits, more for a dataset of a million items or more; a skipped item takes no
// position), so that they are unique and sort in pack order whatever the source's file names
// (which may hold dots, which end a WebDataset key); the source's names are not stored. A
// sample's members are "<key>.<ext>" (the file's bytes under its own lower-case extension, or
// "jpg" when `resize` re-encoded it),
// "<key>.cls" (the label) when labelled, "<key>.mask.<ext>" with a mask and "<key>.json" with
// targets (tar_members). Class names are not stored: a label is its class's index in
// Dataset::classes().
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
#include "stoke/nodes/tar_writer.hpp"

namespace stoke::nodes {

/// What pack_dataset() writes.
enum class PackFormat : std::uint8_t {
  stoke,  ///< one packed shard, X.stoke + X.stoke.idx (packed.hpp): image bytes and labels
  tar,    ///< WebDataset tar shards (tar_writer.hpp): image bytes, labels, masks and targets
};

/// How pack_dataset() packs.
struct PackOptions {
  /// Shrink each image so that its shorter side is at most this many pixels (never enlarged) and
  /// re-encode it as JPEG; a JPEG already small enough and upright is kept byte for byte. 0: every
  /// item's bytes are stored as read. Recorded in a .stoke pack (PackedDataset::resize()); tar
  /// shards do not record it. An item with a mask is refused with it (the mask would no longer
  /// match the image).
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
  /// What to write; `out` is then the data file (stoke) or a TarShardPattern (tar).
  PackFormat format = PackFormat::stoke;
  /// With PackFormat::tar: where shards are cut, and whether each is indexed as it is finished.
  /// Must be left as it is with PackFormat::stoke.
  TarWriterOptions tar{};
};

/// An item that could not be packed: the dataset's name for it and why.
struct PackFailure {
  std::string path;
  std::string reason;  ///< the error, without a leading "<path>: "
};

/// What pack_dataset() did.
struct PackReport {
  /// PackFormat::stoke: the files written (empty paths and zero counts when nothing was written,
  /// and with PackFormat::tar).
  PackSummary summary{};
  /// PackFormat::tar: the shards written, in order (empty when nothing was written).
  std::vector<TarShardSummary> shards;
  /// PackFormat::tar: files that the pattern names after the last shard written ("shard n+1",
  /// n+2, ... while they exist), left by an earlier, larger pack; a reader of the folder would
  /// take them with these. They are not removed.
  std::vector<std::filesystem::path> stale_shards;
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
/// size, and bytes of the data file (tar: of all the shards) so far.
using PackProgress = std::function<void(std::size_t written, std::size_t total, std::uint64_t bytes)>;

/// Packs every item of `dataset` into `out` (X.stoke) and its index (X.stoke.idx), with the
/// dataset's classes, through a PackWriter (so an interrupted or failed call leaves nothing under
/// those names). With PackFormat::tar, into the shards that `out` names (a TarShardPattern),
/// through a TarWriter: each shard appears whole when it is finished, and an interrupted or failed
/// call removes the shards it finished. An item that the format cannot hold (a mask or targets in
/// a .stoke pack; boxes or raw pixels in tar shards; a mask with `resize`) is a failed item,
/// named with the reason. Throws std::invalid_argument for an empty dataset or bad options (resize
/// < 0, quality outside 1..100, threads < 0, a bad shard pattern, tar options with
/// PackFormat::stoke), std::runtime_error naming the file when it cannot be written, and
/// graph::StageError with on_error = fail. `dataset` must stay alive during the call and its
/// read() must be thread-safe (Dataset's contract).
PackReport pack_dataset(const Dataset& dataset, const std::filesystem::path& out, const PackOptions& options = {},
                        const PackProgress& progress = {});

}  // namespace stoke::nodes
