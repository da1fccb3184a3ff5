// TarWriter: samples written as WebDataset tar shards (libarchive's write API), in the layout that
// TarShards reads (tar_shards.hpp): one member per field, named "<key>.<field>", the members of a
// sample one after the other.
//
//   nodes::TarWriter writer(nodes::TarShardPattern("shards/train-%06d.tar"), {.shard_bytes = 1ULL << 30});
//   for (std::size_t i = 0; i < dataset.size(); ++i) {
//     const nodes::Sample sample = dataset.read(i);
//     writer.add(nodes::tar_key(i, dataset.size()), nodes::tar_members(sample));
//   }
//   for (const nodes::TarShardSummary& shard : writer.finish()) std::cout << shard.path << '\n';
//
//   shards/train-000000.tar        000000.jpg  000000.cls  000001.png  000001.cls  ...
//   shards/train-000000.tar.stoke-idx  (its index, written as soon as the shard is finished)
//   shards/train-000001.tar        ...
//
// `stoke pack --format tar` is nodes::pack_dataset() with PackFormat::tar, which uses this writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/sample.hpp"

namespace stoke::nodes {

/// The names of a set of shards: a path with one printf-style zero-padded number, "%0Nd" (N in
/// 1..20; "%%" is a '%'), e.g. "shards/train-%06d.tar" -> shards/train-000000.tar,
/// shards/train-000001.tar, ...; or a plain path ("train.tar"), which names a single shard. The
/// name must end in ".tar" (TarShards takes a folder's *.tar files). The number must be
/// zero-padded so that the shards' names sort in the order they were written, the order in which
/// TarShards reads them.
class TarShardPattern {
 public:
  /// Throws std::invalid_argument naming the pattern and what is wrong: no ".tar" at the end, a
  /// number that is not zero-padded ("%d": use "%06d"), two numbers, a '%' that starts no "%0Nd"
  /// nor "%%".
  explicit TarShardPattern(std::string pattern);

  /// True when the pattern has a number, so that it can name more than one shard.
  bool numbered() const noexcept { return numbered_; }
  /// The path of shard `n` (0, 1, ...). Throws std::invalid_argument when n > 0 and the pattern
  /// has no number, or when n needs more digits than the pattern gives.
  std::filesystem::path path(std::size_t n) const;
  const std::string& pattern() const noexcept { return pattern_; }

 private:
  std::string pattern_;
  std::string before_, after_;  // the text around the number, with "%%" made '%'
  int width_ = 0;
  bool numbered_ = false;
};

/// One member of a sample: its field (what follows "<key>.": "jpg", "cls", "mask.png", "json")
/// and its bytes.
struct TarMember {
  std::string field;
  Bytes bytes;
};

/// The key of the sample at position `position` of `count`: the position in decimal, zero-padded
/// to 6 digits or to as many as count - 1 has, whichever is more ("000017"), so that the keys of
/// one set of shards are unique and sort in the order they were written.
std::string tar_key(std::size_t position, std::size_t count);

/// The field a sample's image is stored under: the lower-case extension of sample.name when it
/// is one of default_image_extensions() ("photos/cat/1.JPEG" -> "jpeg"), else the one its bytes'
/// format shows (detect_format: "jpg", "png", "bmp", "gif", "webp", "tif", "ppm", "dcm").
/// Throws std::invalid_argument naming the sample when neither shows an image.
std::string tar_image_field(const Sample& sample);

/// The members a sample becomes, the inverse of TarShards::read():
///   `image_field` (empty: tar_image_field(sample))  sample.bytes
///   "cls"         the decimal label and a '\n', when sample.label >= 0
///   "mask.<ext>"  sample.mask, when it has one; <ext> is the lower-case extension of mask_name
///                 when it is an image extension, else the one the bytes' format shows, else "bin"
///   "json"        sample.targets, when it has any: one flat JSON object, a scalar target (shape
///                 {}) a number, a vector target (shape {n}) an array of numbers; an integral
///                 value is written as an integer, any other with the digits that read back as
///                 the same float
/// The bytes are shared with `sample` (no copy) but for the small .cls and .json members.
/// Throws std::invalid_argument naming the sample for what TarShards could not give back: raw
/// pixels (Encoding::raw_rgb: encode them first), detection boxes, a target of two or more
/// dimensions or with a value that is not finite, a label above 999999.
std::vector<TarMember> tar_members(const Sample& sample, std::string image_field = {});

/// How TarWriter cuts and indexes its shards.
struct TarWriterOptions {
  /// Start a new shard before a sample that would take the current one past this many bytes:
  /// the shard's whole size, 512-byte tar headers, padding and the 1024-byte end counted. A
  /// sample bigger than this on its own gets a shard of its own. 0: no limit.
  std::uint64_t shard_bytes = 0;
  /// Start a new shard after this many samples. 0: no limit.
  std::size_t shard_samples = 0;
  /// Index each shard as soon as it is finished, by opening it once with TarShards (its index file
  /// beside it, "X.tar.stoke-idx", or in TarShards' fallback folder), so that readers do not have
  /// to. A shard in which TarShards finds no sample gets no index.
  bool write_index = true;
  /// The modification time stored in every member's header, in seconds since the epoch. The
  /// default (0) makes shards reproducible: the same samples give the same bytes.
  std::int64_t mtime = 0;
};

/// A shard that TarWriter finished.
struct TarShardSummary {
  std::filesystem::path path;
  std::filesystem::path index;  ///< its index file; empty when none was written
  std::size_t first = 0;        ///< the position (in the writer's sample order) of its first sample
  std::size_t samples = 0;
  std::uint64_t bytes = 0;  ///< the shard's size
};

/// Writes samples into tar shards named by a TarShardPattern, cutting a new shard at the limits of
/// TarWriterOptions. The format is ustar (512-byte headers; a member's name up to 255 bytes,
/// split at a '/' beyond 100); every member is a regular file with mode 0644, owner 0.
///
/// Atomic per shard: each shard is written under a temporary name beside it ("X.tar.tmp-*"),
/// then flushed to disk, closed and renamed to its name when it is full (so shards appear
/// whole, one by one, and can be read while the next is written), then indexed. An existing
/// file under a shard's name is replaced only then. Destroying a writer without finish() (an
/// error, a stop) removes the temporary file and also the shards this writer finished and
/// their index files, so that an interrupted pack leaves no partial set of shards behind (a
/// crash leaves the finished shards and an X.tar.tmp-*).
///
/// Not thread-safe: add() from one thread (e.g. an ordered serial sink).
class TarWriter {
 public:
  /// Throws std::invalid_argument when the options set a limit and the pattern has no number.
  /// Creates no file until the first add().
  explicit TarWriter(TarShardPattern pattern, TarWriterOptions options = {});
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  /// Appends one sample: a member "<key>.<field>" per entry of `members`, in that order. The key
  /// must not be empty, start with '.' or hold a '.' in its last path component (TarShards reads
  /// a member's key up to the first '.' of its base name), and should differ from the previous
  /// sample's (consecutive members with the same key are one sample); a field must not be empty.
  /// Throws std::invalid_argument for a bad key or field, std::runtime_error naming the file
  /// when it cannot be written (e.g. no space left) or a name is too long for ustar.
  void add(std::string_view key, std::span<const TarMember> members);
  /// Finishes the last shard (renames it, indexes it) and returns every shard written, in order.
  /// Nothing when no sample was added. Call once; add() may not be called after it.
  std::vector<TarShardSummary> finish();

  /// Samples added.
  std::size_t samples() const noexcept { return samples_; }
  /// Bytes written so far: the finished shards' sizes plus the current shard's members.
  std::uint64_t bytes() const noexcept;
  /// The shards finished so far.
  const std::vector<TarShardSummary>& finished() const noexcept { return finished_; }

 private:
  class Shard;
  void finish_shard();

  TarShardPattern pattern_;
  TarWriterOptions options_;
  std::unique_ptr<Shard> shard_;  // the shard being written, if any
  std::vector<TarShardSummary> finished_;
  std::size_t samples_ = 0;
  bool done_ = false;
};

}  // namespace stoke::nodes
