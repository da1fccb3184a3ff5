// Loader: the input pipeline as something a training loop pulls batches from, epoch after epoch --
// what the Python module's stoke.Loader is made of, and a C++ program's way to drive its own step
// without a graph stage of its own.
//
//   stoke::train::Loader loader(stoke::train::open_dataset("photos/train"), {.batch_size = 64, .size = 224});
//   for (int epoch = 0; epoch < 10; ++epoch) {
//     loader.begin();                                   // epoch `epoch`: its order, its draws
//     for (auto batch = *loader.next(); batch.valid(); batch = *loader.next()) step(batch.fields());
//   }
//
// The pipeline runs on a thread of its own, over the epochs one after another (the next epoch's
// batches are prepared while the caller finishes the last one; a loader told the run's epochs
// stops at the last one's end), and hands its batches to a queue the caller takes from. Memory
// stays bounded: the batches are slots of the input's pool, so a caller that keeps batches makes
// the pipeline wait for a free slot, never allocate one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stoke/graph/decision.hpp>
#include <stoke/graph/stats.hpp>
#include <stoke/nodes/batch.hpp>
#include <stoke/nodes/dataset.hpp>
#include <string>
#include <vector>

#include "stoke/train/input.hpp"
#include "stoke/train/loader_batch.hpp"

namespace stoke::train {

/// Where a Loader stands: the epoch, and the items of that epoch's order (this rank's share)
/// already handed out in batches. What a checkpoint keeps to resume in the middle of an epoch.
struct LoaderPosition {
  std::uint32_t epoch = 0;
  std::size_t position = 0;
  friend bool operator==(const LoaderPosition&, const LoaderPosition&) = default;
};

/// What a Loader's pipeline has done since it (last) started.
struct LoaderStats {
  std::vector<graph::StageStats> stages;
  /// The stage that limits the batches' rate: "consumer" when the batches wait for the caller (the
  /// batch stage is blocked on a full pool or queue most of the time it is not busy), else the
  /// input stage that is busiest for its concurrency.
  std::string bottleneck;
  std::vector<graph::Decision> decisions;  ///< the scheduler's moves, in order
  std::uint64_t batches = 0;               ///< handed to the caller
  std::uint64_t images = 0;
  std::uint64_t skipped = 0;               ///< items skipped (unreadable, undecodable)
  std::vector<SkippedFile> skipped_files;  ///< the first ones, with the file and why
  /// What the dataset left out when it opened (Dataset::ignored(), left_out_of): never read,
  /// apart from `skipped`.
  LeftOut left_out{};
  /// What the dataset has read over the network since it opened (remote shards); else nullopt.
  std::optional<nodes::NetworkStats> network{};
  double seconds = 0;  ///< since the pipeline started
  double waited = 0;   ///< seconds the caller spent in next() waiting for a batch (it was starved)
  std::size_t max_in_flight = 0;
};

/// See the top of this file. One caller thread; stats(), position() and write_report() may also
/// be called from other threads at any time.
class Loader {
 public:
  /// `config.epochs` is not used: the loader goes on from epoch to epoch as the caller asks
  /// (begin()). config.first_epoch and config.start give the first epoch's position. `epochs`,
  /// when not 0, is where the run ends: it reads epochs 0 .. epochs - 1, and the pipeline stops
  /// at the last one's end instead of preparing the next epoch's first batches (up to the pool's
  /// batches and max_in_flight items of decoding that no one would take); begin() in a later
  /// epoch throws std::out_of_range. Throws std::invalid_argument for a bad config (as
  /// make_input) or a first epoch at or past `epochs`.
  Loader(nodes::DatasetPtr dataset, InputConfig config, std::uint32_t epochs = 0);
  /// Cancels the pipeline and waits for its threads. Batches the caller still holds stay valid.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Batches per epoch: this rank's items / batch size, rounded up (down with drop_last). Skipped
  /// items can make an epoch shorter.
  std::size_t size() const noexcept;
  /// Items per epoch (this rank's share).
  std::size_t items_per_epoch() const noexcept;
  /// The shape of every batch.
  const nodes::BatchShape& shape() const noexcept;
  const InputConfig& config() const noexcept;
  /// With config().convert_on_device: what the caller applies to the uint8 images (the trailing
  /// normalize the host's list left out, or a plain 0..1 scale); nothing otherwise.
  const std::optional<gpu::ConvertOptions>& convert() const noexcept;
  const nodes::Dataset& dataset() const noexcept;

  /// The epoch the next begin() iterates, from its start.
  void set_epoch(std::uint32_t epoch);
  /// Where the next begin() starts (a resumed run: a position from position()).
  void seek(LoaderPosition position);
  /// Where the loader stands: during an epoch, after the batches next() returned; after an
  /// epoch's end, the next epoch's start.
  LoaderPosition position() const noexcept;

  /// Starts an epoch: the one set_epoch() or seek() named, else the one after the last (an epoch
  /// left before its end counts as done, as when a DataLoader's iterator is dropped), at first
  /// the config's first_epoch and start. The running pipeline goes on when it is already there;
  /// otherwise it is cancelled and a new one starts at the position (its batches are dropped).
  void begin();
  /// The next batch of the epoch begin() started, or an empty one (valid() false) at the
  /// epoch's end. Waits for one at most `wait`: std::nullopt when none came by then (a caller
  /// that must look at signals calls again). Rethrows what the pipeline threw (a stage's error
  /// under OnError::fail names the stage and the item's file); the next begin() starts afresh.
  /// Throws std::logic_error outside an epoch and std::runtime_error when the process forked
  /// after the pipeline started (its threads are in the parent only).
  std::optional<LoaderBatch> next(std::chrono::milliseconds wait = std::chrono::milliseconds::max());

  LoaderStats stats() const;
  /// stats() as JSON (a report for a run's records), written atomically to `path`. Throws
  /// std::runtime_error naming the path when it cannot be written.
  void write_report(const std::filesystem::path& path) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// For each dataset index, its position in the visiting order of `epoch` (an item that a padded
/// share repeats keeps its first position); indices the epoch does not visit read 0.
std::vector<std::uint32_t> positions_in(const nodes::EpochOrder& order, std::uint32_t epoch);

}  // namespace stoke::train
