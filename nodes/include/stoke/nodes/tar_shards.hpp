// TarShards: a dataset stored as WebDataset-layout tar shards, read in place by offset.
//
//   shards/train-000000.tar      members, grouped by key into samples (tar order):
//     train/000017.jpg           sample "train/000017": the image (the first member with an image
//     train/000017.cls             extension), "3": its class label (Sample::label)
//     train/000017.mask.png        a field starting with "mask.": the mask (Sample::mask)
//     train/000017.json            {"age": 63, "box": [1, 2, 3, 4]}: targets (Sample::targets)
//     train/000018.jpg           sample "train/000018" (no label: -1)
//     train/000018.txt           a field TarShards does not read: counted by unused_fields()
//   shards/train-000001.tar
//
// A member's key is its path up to the first '.' of its base name, its field what follows that dot
// ("jpg", "cls", "mask.png", "seg.json"); consecutive members with the same key form one sample,
// as WebDataset groups them. Shards must be uncompressed tar (ustar, pax or GNU): a .tar.gz cannot
// be read by offset, and is refused with an error naming it.
//
// Each shard is indexed once with libarchive (headers only: every member's data offset and size,
// and the .cls labels) and the index is cached in a file (see TarShardsOptions), validated against
// the shard's size and modification time and rebuilt when they differ. read() then takes a
// member's bytes from a memory mapping of the shard, so random access, shuffling, rank sharding
// and exact resume work as for any other Dataset.
//
// Index file format version 1 ("X.tar.stoke-idx"; a cache, not an exchange format). Integers are
// little-endian.
//     0   char[8] magic "STOKETAR"
//     8   u32     format version (1)
//     12  u32     header size (64)
//     16  u64     size of the shard in bytes when indexed
//     24  i64     the shard's modification time then, in ns since the epoch
//     32  u64     entry count N
//     40  u64     string table size S
//     48  u64     reserved (0)
//     56  u64     checksum: FNV-1a 64 of the whole index, with these 8 bytes taken as zero
//     64          N entry records of 40 bytes, in tar order:
//                   u64 offset (a member's data; for a note, the byte the note is about),
//                   u64 size (a member's data; 0 for a note), u64 text offset in the string
//                   table, u32 name size, u32 reason size (the reason follows the name; 0 for a
//                   member), u32 kind (0 member, 1 entry left out, 2 damage), i32 value (a .cls
//                   member's label, -2 when it is not a label; else -1)
//     64 + 40N    the string table: S bytes, not terminated
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoke/nodes/dataset.hpp"
#include "stoke/nodes/image_folder.hpp"
#include "stoke/nodes/packed.hpp"

namespace stoke::remote {
class RemoteUrl;
}  // namespace stoke::remote

namespace stoke::nodes {

namespace detail {
struct FetchedSpan;
class MappedFile;
class RemoteShards;
struct TarIndex;
}  // namespace detail

/// The tar index format version this build writes and reads.
inline constexpr std::uint32_t tar_index_format_version = 1;

/// The index file kept beside `shard` ("X.tar" -> "X.tar.stoke-idx").
std::filesystem::path tar_index_path(const std::filesystem::path& shard);

/// The folder where index files go when a shard's own folder cannot take them: $STOKE_CACHE/tar-index,
/// else $XDG_CACHE_HOME/stoke/tar-index, else $HOME/.cache/stoke/tar-index; empty when none of the
/// three variables is set.
std::filesystem::path default_tar_index_cache();

/// The shard paths a WebDataset-style pattern names, sorted (byte order) without duplicates:
/// brace ranges "train-{000000..000146}.tar" (zero-padded to the width of the first bound when it
/// starts with 0), brace lists "{train,val}.tar" (nested braces work), then shell wildcards
/// (* ? [...]) matched against the file system. A pattern without braces or wildcards is returned
/// as it is. Throws std::invalid_argument naming the pattern for an unbalanced brace or a bad
/// range, and std::runtime_error when a wildcard matches no file.
std::vector<std::filesystem::path> expand_shard_pattern(std::string_view pattern);

/// True for a path whose name shows a tar shard: ".tar", or a compressed tar (".tar.gz", ".tgz",
/// ".tar.zst", ".tar.bz2", ".tar.xz", ".tar.lz4"; TarShards refuses those with an explanation).
bool is_tar_shard_name(const std::filesystem::path& path);

/// What opening a dataset does with a shard that cannot be opened (missing, forbidden, not a tar,
/// its index unreadable).
enum class ShardFailure : std::uint8_t {
  fail,  ///< the open throws, naming the shard
  skip,  ///< the shard is left out and listed by ignored() with the reason; the others are read
};

struct TarShardsOptions {
  /// Field extensions (the part after the field's last '.', without the dot) that are images;
  /// matched case-insensitively. A sample's image is its first member with one of them.
  /// Default: default_image_extensions() (jpg jpeg png bmp gif webp tif tiff ppm pgm pbm dcm dicom).
  std::vector<std::string> image_extensions = default_image_extensions();
  /// Where index files are read and written. Empty (the default): beside each shard
  /// (tar_index_path), or, where that file cannot be written (a read-only folder), in
  /// `fallback_index_dir`. Set: only in this folder (created when missing), under a name made
  /// of a hash of the shard's absolute path and its file name.
  std::filesystem::path index_dir{};
  /// The folder index files go to when they cannot go beside their shard (default:
  /// default_tar_index_cache(); empty: none).
  std::filesystem::path fallback_index_dir = default_tar_index_cache();
  /// Write index files (false: use valid ones found, but index the others in memory only, at
  /// every open).
  bool write_index = true;
  /// When no index file can be written anywhere, index the shard in memory only (the default);
  /// false: throw std::runtime_error naming the shard and the places tried.
  bool allow_memory_index = true;
  /// How the shards will be read, for the kernel's read-ahead (madvise), as for PackedDataset.
  PackAccess access = PackAccess::random;
  /// A shard that cannot be opened fails the open (the default) or is left out and named.
  ShardFailure on_shard_error = ShardFailure::fail;
  /// Shuffle by shards (groups()): an epoch visits the shards in a shuffled order, `window` at a
  /// time, the samples of each window shuffled together (OrderOptions::groups). 0 (the default):
  /// every sample among all. With remote shards and no cache folder, a window lets whole shards be
  /// streamed into memory ahead of the reads (memory_bytes) instead of a range request per sample.
  std::uint32_t window = 0;

  // ---- remote shards (URLs) only
  /// A folder where whole remote shards are kept (remote::ShardCache: LRU within cache_bytes,
  /// crash-safe, shared by runs and datasets) and read from. Empty (the default): nothing is kept,
  /// each member is read with one range request.
  std::filesystem::path cache_dir{};
  /// The cache folder's budget in bytes (given with cache_dir): at least the largest shard.
  std::uint64_t cache_bytes = 0;
  /// With a cache: download the shards in dataset order in the background, while the folder has
  /// free room (it removes nothing for that), so reads find them there.
  bool prefetch = true;
  /// With a window and without a cache folder: the most bytes of whole shards held in memory,
  /// downloaded in the order the epoch will read them (Dataset::will_read, told by a
  /// DatasetSource made with the dataset) and let go when their last planned sample is read;
  /// samples of a shard not held are read with range requests. 0: range requests only. A budget
  /// of window + 2 shards keeps the downloads ahead of the reads.
  std::uint64_t memory_bytes = std::uint64_t{2} << 30;
  /// A request during which no byte arrives for this long fails (and is tried again): a server
  /// that stops answering never hangs the run.
  std::chrono::milliseconds stall_limit{std::chrono::seconds(30)};
  /// Tries after the first for a failure that may pass (5xx, a dropped connection, a stall), after
  /// a growing wait (250 ms, doubled each time).
  int retries = 4;
};

/// How a shard's index was obtained by the TarShards that opened it.
enum class TarIndexSource : std::uint8_t {
  loaded,   ///< read from a valid index file
  written,  ///< built from the shard and written to an index file
  memory,   ///< built from the shard and kept in memory only
};

/// One shard of a TarShards dataset.
struct TarShardInfo {
  std::filesystem::path path;  ///< its path, or its URL (without credentials)
  /// The index file read or written (a URL when taken from the server); empty when in memory only.
  std::filesystem::path index;
  TarIndexSource source = TarIndexSource::memory;
  std::size_t first = 0;    ///< the dataset index of its first sample
  std::size_t samples = 0;  ///< samples taken from it
  std::uint64_t bytes = 0;  ///< the shard's size
};

/// The samples of WebDataset-layout tar shards (see the top of this file), indexed at
/// construction. Item order: shards in byte order of their paths, samples in tar order.
///
/// Labels: a sample's .cls member holds its decimal class label (0..999999; spaces and a line end
/// around it are fine); samples without one have label -1. classes() is "0" .. the largest label
/// ("" when no sample has a label), as for FileList: tar shards carry no class names.
///
/// Targets: a sample's .json member is a flat JSON object; each key whose value is a number
/// becomes a scalar target (shape {}), each whose value is an array of numbers a vector (shape
/// {n}); other values (strings, booleans, null, nested objects) are left out. It is parsed by
/// read(): a member that is not a JSON object makes read() throw naming it.
///
/// Left out, each listed by ignored() with the reason (its path is "shard.tar#member" or
/// "shard.tar#key"): a sample without an image; a sample whose .cls is not a label; members that
/// are not regular files (links, devices; folders are passed over silently), sparse members,
/// members whose base name starts with '.' or has no '.'; and damage. Fields no sample uses
/// (".txt", a second image, a second .cls) are counted by unused_fields() and listed once per
/// field by ignored().
///
/// Damage: in a shard cut short (a member whose data runs past the end, a header cut in two),
/// the samples complete before the damage are kept and the damage is listed by ignored() naming
/// the shard, the member and the byte; a corrupt header is listed the same way and reading goes
/// on from the next valid header (libarchive's resynchronisation). The sample in progress at a
/// damage is left out (it may be missing a member), and so is the one that the damage cut.
/// The other shards are read as usual.
///
/// Memory: per sample about 80 bytes (offsets and sizes in one flat array, keys in one string
/// arena); the shards are memory-mapped (no file descriptor stays open).
///
/// Thread-safety: immutable after construction; read() may be called from any number of threads.
/// Samples hold views into the mappings and keep them alive, so they may outlive the dataset.
/// Shards should not be rewritten in place while open (replace them by renaming: open datasets
/// keep the old file). read() checks the shard's size first (one stat()), so that a shard
/// truncated in place makes read() of the lost samples throw instead of failing with SIGBUS; a
/// truncation between that check and the copy of the bytes still can.
class TarShards final : public Dataset {
 public:
  /// Opens `shards`: each a tar file, or a folder whose *.tar files (not those in its subfolders)
  /// are all taken; its other files are listed by ignored(). Throws std::runtime_error naming the
  /// shard: when one does not exist or cannot be read, is compressed ("use uncompressed shards"),
  /// is not a tar file, when a folder has no .tar file, when a shard is given twice, or when no
  /// shard yields a sample (with the first reasons from ignored()).
  ///
  /// A shard may be a URL (http://, https://, s3://bucket/key; remote::RemoteUrl): its index is
  /// the "X.tar.stoke-idx" beside it on the server when one is there and fits the shard's size,
  /// else the one in index_dir (else fallback_index_dir) made by an earlier open, else built from
  /// one download of the shard (into the cache folder, else a temporary file) and written there.
  /// read() then takes each member with one range request, or, with a cache (cache_dir), from the
  /// shard kept there (downloaded when it is not); a read that fails names the member and the URL.
  /// A missing or forbidden shard throws remote::FetchError naming the URL (or is left out, with
  /// ShardFailure::skip); a cache budget below a shard's size throws naming both.
  explicit TarShards(std::vector<std::filesystem::path> shards, TarShardsOptions options = {});
  /// One shard, or a folder of shards.
  explicit TarShards(const std::filesystem::path& shard_or_folder, TarShardsOptions options = {});
  ~TarShards() override;

  std::size_t size() const noexcept override { return items_.size(); }
  int label(std::size_t i) const override;
  /// "shard.tar#key", e.g. "shards/train-000000.tar#train/000017".
  std::string name(std::size_t i) const override;
  /// The image member's bytes as a view into the mapped shard (Encoding::encoded), its label, and
  /// the mask member's bytes (Sample::mask, mask_name "shard.tar#key.mask.png") and the .json's
  /// targets when the sample has them. Throws std::runtime_error naming the shard and member when
  /// a member's bytes are not all in the shard, or its .json is not a flat JSON object.
  Sample read(std::size_t i) const override;
  /// "0" .. the largest label; empty when no sample has a label.
  const std::vector<std::string>& classes() const noexcept override { return classes_; }
  const std::vector<IgnoredFile>& ignored() const noexcept override { return ignored_; }
  /// For remote shards: requests, bytes, time waiting, and the cache's use; nullopt when every
  /// shard is a local file.
  std::optional<NetworkStats> network() const override;
  /// The shards, with the window it was opened with (TarShardsOptions::window).
  Groups groups() const override;
  /// Remote shards, a window and no cache folder: streams the shards these items need into
  /// memory, in this order, within memory_bytes (see TarShardsOptions), while the handle lives.
  std::shared_ptr<const void> will_read(std::span<const std::uint64_t> items) const override;

  /// The sample's key ("train/000017").
  std::string_view key(std::size_t i) const;
  /// The index of the shard (in shards()) that holds sample i.
  std::size_t shard_of(std::size_t i) const;
  /// The shards in item order.
  const std::vector<TarShardInfo>& shards() const noexcept { return shards_; }
  /// Fields that no sample uses, with the number of members that have them ("txt": 1200).
  const std::map<std::string, std::size_t>& unused_fields() const noexcept { return unused_fields_; }

 private:
  struct Member {
    std::uint64_t offset = 0;
    std::uint64_t size = 0;
  };
  struct Item {
    std::uint64_t key_offset = 0;  // in keys_
    std::uint32_t key_size = 0;
    std::uint32_t shard = 0;
    Member image, mask, json;
    std::uint32_t image_field = 0;  // in fields_
    std::uint32_t mask_field = 0;   // in fields_; no_field: no mask
    bool has_json = false;
    std::int32_t label = -1;
  };
  void add_shard(const std::filesystem::path& path, const TarShardsOptions& options,
                 std::map<std::string, std::string>& unused_first);
  void add_remote_shard(const std::string& url, const TarShardsOptions& options,
                        std::map<std::string, std::string>& unused_first);
  // A remote shard's index: the one beside it on the server, else the cache folder's, else built
  // from one download of the shard (and written to the cache folder).
  detail::TarIndex remote_index(const remote::RemoteUrl& url, std::uint64_t size, const TarShardsOptions& options,
                                TarShardInfo& info);
  void add_samples(const detail::TarIndex& index, std::uint32_t shard, const TarShardsOptions& options,
                   std::map<std::string, std::string>& unused_first);
  std::uint32_t field_id(std::string_view field);
  const Item& item(std::size_t i) const;
  // A remote sample's members in one range request, when it reads more than its image.
  std::optional<detail::FetchedSpan> fetch_together(const Item& item) const;
  Bytes member_bytes(const Item& item, const Member& member, std::string_view field,
                     const std::optional<detail::FetchedSpan>& fetched) const;

  std::vector<Item> items_;
  std::string keys_;                 // every sample's key, back to back
  std::vector<std::string> fields_;  // interned field names
  std::vector<TarShardInfo> shards_;
  std::vector<std::shared_ptr<const detail::MappedFile>> maps_;  // one per shard; null for a remote one
  std::vector<std::pair<std::uint64_t, std::uint64_t>> files_;   // (st_dev, st_ino) of each mapped shard
  std::vector<std::shared_ptr<const remote::RemoteUrl>> urls_;   // one per shard; null for a local one
  std::unique_ptr<detail::RemoteShards> remote_;                 // made with the first remote shard
  std::shared_ptr<const std::vector<std::uint64_t>> group_starts_;  // each shard's first item
  std::uint32_t window_ = 0;
  std::vector<std::string> classes_;
  std::vector<IgnoredFile> ignored_;
  std::map<std::string, std::size_t> unused_fields_;
  PackAccess access_ = PackAccess::random;
};

}  // namespace stoke::nodes
