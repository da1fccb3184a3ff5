// Dataset: an indexed collection of samples (an image folder, a file list, CIFAR batches, a packed
// shard), plus the per-epoch order in which a run visits it (shuffle, rank/world sharding,
// repeat) and the graph source that produces that order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "stoke/nodes/sample.hpp"

namespace stoke::nodes {

/// A file a dataset found but did not count, and why (e.g. "not an image: .txt").
struct IgnoredFile {
  std::string path;
  std::string reason;
};

/// What a dataset has read over the network (remote tar shards) since it was opened.
struct NetworkStats {
  std::uint64_t requests = 0;  ///< HTTP requests, retries included
  std::uint64_t retries = 0;
  std::uint64_t bytes = 0;  ///< bytes received
  /// Time read() calls spent waiting on the network (range requests, shards downloaded on demand),
  /// summed over the reading threads.
  double wait_seconds = 0;
  /// Shards kept in a local cache folder (the fields below); false: each member read by a range request.
  bool cached = false;
  std::uint64_t cache_hits = 0;        ///< shard lookups answered from the folder
  std::uint64_t cache_misses = 0;      ///< shards downloaded because a read needed them
  std::uint64_t cache_prefetched = 0;  ///< shards downloaded ahead of the reads
  std::uint64_t cache_evictions = 0;   ///< shards removed to make room
  std::uint64_t cache_bytes = 0;       ///< bytes in the folder now (with downloads under way)
  std::uint64_t cache_peak_bytes = 0;  ///< the most it held
  std::uint64_t cache_budget = 0;
  /// Without a cache folder: whole shards streamed into memory ahead of the reads
  /// (TarShardsOptions::memory_bytes; the fields below); reads of the others are range requests.
  std::uint64_t stream_budget = 0;      ///< 0: not streaming
  std::uint64_t stream_shards = 0;      ///< shards downloaded whole into memory
  std::uint64_t stream_peak_bytes = 0;  ///< the most it held
};

/// Items stored together (a tar dataset's shards), for an epoch order that visits them a few groups
/// at a time (OrderOptions::groups).
struct Groups {
  /// Where each group starts: ascending item indices, the first 0. Null or empty: no groups.
  std::shared_ptr<const std::vector<std::uint64_t>> starts;
  /// How many groups an epoch visits at a time (0: items in any order, the groups ignored).
  std::uint32_t window = 0;
};

/// An indexed, immutable collection of samples. read() is thread-safe: the read stage of a
/// pipeline calls it from several threads at once.
class Dataset {
 public:
  virtual ~Dataset() = default;

  /// Number of items.
  virtual std::size_t size() const noexcept = 0;
  /// Label of item i (-1 when unlabelled), without reading it.
  virtual int label(std::size_t i) const = 0;
  /// Where item i comes from, for reports (a path, or "file.pack#i").
  virtual std::string name(std::size_t i) const = 0;
  /// Reads item i's bytes; sets index and label (not epoch). Throws std::runtime_error naming the
  /// item when it cannot be read.
  virtual Sample read(std::size_t i) const = 0;

  /// Class names by label (empty when the dataset has none).
  virtual const std::vector<std::string>& classes() const noexcept;
  /// Files seen while listing the dataset that are not part of it.
  virtual const std::vector<IgnoredFile>& ignored() const noexcept;
  /// What reading it has taken from the network so far; nullopt (the default) for a dataset read
  /// from local files.
  virtual std::optional<NetworkStats> network() const;
  /// The groups an epoch order should visit a window at a time (OrderOptions::groups): a tar
  /// dataset's shards when it was opened with a window (TarShardsOptions::window). Default: none.
  virtual Groups groups() const;
  /// A hint that these items will be read, in about this order, after those of the plans told
  /// before (the rest of an epoch's order, then the next epoch's): a dataset that fetches ahead
  /// (remote tar shards) fetches what they need. The plan holds while the returned handle lives:
  /// dropping it says that its reads not yet made will not come. Thread-safe; the default does
  /// nothing and returns null.
  virtual std::shared_ptr<const void> will_read(std::span<const std::uint64_t> items) const;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

/// What a sharded epoch does with the items left over when the world size does not divide the
/// dataset's: ranks running collectives every step need the same number of items each.
enum class ShardRemainder : std::uint8_t {
  uneven,  ///< every item once: the first size % world ranks get one more (validation, counting)
  drop,    ///< every rank gets size / world: the permutation's last size % world items sit out the epoch
  pad,     ///< every rank gets ceil(size / world): the missing positions repeat the permutation's first items
};
const char* to_string(ShardRemainder remainder) noexcept;

/// Which items a rank visits in which order, per epoch.
struct OrderOptions {
  bool shuffle = true;
  std::uint64_t seed = 0;
  /// Sharding: rank r of `world` gets positions r, r+world, r+2*world, ... of the epoch's
  /// permutation, so every item goes to exactly one rank per epoch (with `remainder` uneven or
  /// drop), and the items of one step of all the ranks together are those of one rank's step of
  /// world times the batch.
  std::uint32_t rank = 0;
  std::uint32_t world = 1;
  ShardRemainder remainder = ShardRemainder::uneven;
  /// Shuffling by groups (Dataset::groups(), a tar dataset's shards), with groups.window = W > 0:
  /// the groups in a shuffled order, W at a time, the items of each window of W groups shuffled
  /// together. A weaker shuffle than the default (every item among all), which lets a reader hold
  /// W shards at a time: what streaming whole shards from a server needs. Sharding then takes
  /// positions of this permutation as above.
  Groups groups{};
};

/// The visiting order of one rank: a permutation of [0, size) per epoch (a function of seed, epoch
/// and the groups only), then this rank's share of it. Throws std::invalid_argument when rank >=
/// world, world == 0, or the group starts are not ascending from 0 within size.
class EpochOrder {
 public:
  EpochOrder(std::size_t size, OrderOptions options);

  /// Item indices this rank visits in `epoch`, in order.
  std::vector<std::uint64_t> indices(std::uint32_t epoch) const;
  /// The whole epoch's permutation, every rank's positions (indices() takes this rank's of it).
  std::vector<std::uint64_t> permutation(std::uint32_t epoch) const;
  /// How many items this rank visits per epoch.
  std::size_t per_epoch() const noexcept;

  const OrderOptions& options() const noexcept { return options_; }

 private:
  std::size_t size_;
  OrderOptions options_;
};

/// What the source stage emits: which item of which epoch to read next.
struct ItemRef {
  std::uint64_t index = 0;
  std::uint32_t epoch = 0;
};

/// The source stage of a pipeline: ItemRefs in EpochOrder, epoch after epoch. `epochs` = 0
/// repeats forever (stop the pipeline to end it). A SourceBody for stoke::graph.
class DatasetSource {
 public:
  DatasetSource(std::size_t dataset_size, OrderOptions options, std::uint32_t epochs = 1,
                std::uint32_t first_epoch = 0);
  /// The same, telling `dataset` (Dataset::will_read) the rest of each epoch's order as the source
  /// starts emitting it, and the next epoch's with it, so that a dataset that fetches ahead
  /// fetches in the order of the reads. A plan is dropped two epochs later, or with the source.
  DatasetSource(DatasetPtr dataset, OrderOptions options, std::uint32_t epochs = 1, std::uint32_t first_epoch = 0);

  std::optional<ItemRef> operator()();
  /// Passes over the next `count` items without emitting them (or telling the dataset): where a
  /// resumed run starts inside its first epoch. Returns how many there were.
  std::size_t skip(std::size_t count);

 private:
  bool advance();  // to the next item, crossing into the next epoch; false at the end
  bool has_epoch(std::uint32_t epoch) const noexcept { return forever_ || epoch < end_epoch_; }
  void tell();  // the dataset, of the rest of this epoch and of the next

  EpochOrder order_;
  DatasetPtr dataset_;                                                        // told the order; may be null
  std::vector<std::uint64_t> upcoming_;                                       // the next epoch's order, once told
  std::vector<std::pair<std::uint32_t, std::shared_ptr<const void>>> plans_;  // the handles, by epoch
  std::uint32_t end_epoch_;  // exclusive; 0 means no end
  std::uint32_t epoch_;
  std::vector<std::uint64_t> current_;
  std::size_t next_ = 0;
  bool forever_;
  bool told_ = false;  // dataset_ was told current_'s rest
};

/// The read stage: ItemRef -> Sample (dataset->read, with the epoch filled in). Thread-safe.
class ReadSample {
 public:
  explicit ReadSample(DatasetPtr dataset) : dataset_(std::move(dataset)) {}
  Sample operator()(ItemRef ref) const;

 private:
  DatasetPtr dataset_;
};

}  // namespace stoke::nodes
