// Packed shards: many small files stored as one large data file plus an index, so that reading a
// dataset is a few large sequential reads (one pread per item from an open file) instead of one
// open/read/close per image. Written by PackWriter (and `stoke pack`), read by PackedDataset.
//
// Format version 1. Two files, `X.stoke` (data) and `X.stoke.idx` (index); every integer is
// little-endian; offsets are in bytes from the start of the file.
//
//   X.stoke, the data file:
//     0   char[8] magic "STOKEDAT"
//     8   u32     format version (1)
//     12  u32     header size (32)
//     16  u64     pack id: random, written into both files so that a mixed-up pair is detected
//     24  u64     reserved (0)
//     32  ...     the items' bytes, back to back in item order, exactly as added (no padding)
//
//   X.stoke.idx, the index:
//     0   char[8] magic "STOKEIDX"
//     8   u32     format version (1)
//     12  u32     header size (64)
//     16  u64     pack id (the data file's)
//     24  u64     item count N
//     32  u64     size of the data file in bytes
//     40  u32     resize: the shorter side images were resized to when packed; 0 = original bytes
//     44  u32     class count C
//     48  u64     string table size S
//     56  u64     checksum: FNV-1a 64 of the whole index, with these 8 bytes taken as zero
//     64          N item records of 32 bytes:
//                   u64 offset in the data file, u64 size,
//                   u64 name offset in the string table, u32 name size, i32 label (-1: none)
//     64 + 32N    C class records of 16 bytes: u64 name offset, u32 name size, u32 reserved (0)
//     64+32N+16C  the string table: S bytes of UTF-8 names, not terminated
//     The index ends there: its size is exactly 64 + 32N + 16C + S.
//
// Item names are whatever the writer gave (stoke pack stores paths relative to the packed
// folder). Labels are -1 or, when there are classes, below C.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nodes/dataset.hpp"

namespace stoke::nodes {

namespace detail {
class MappedFile;
}

/// The packed format version this build writes and reads.
inline constexpr std::uint32_t pack_format_version = 1;

/// The index file that belongs to the data file `data` ("X.stoke" -> "X.stoke.idx").
std::filesystem::path pack_index_path(const std::filesystem::path& data);

/// How a PackedDataset will be read, for the kernel's read-ahead (madvise).
enum class PackAccess : std::uint8_t {
  random,      ///< shuffled order: no read-ahead past an item
  sequential,  ///< item order: aggressive read-ahead over the whole file
};

struct PackedOptions {
  PackAccess access = PackAccess::random;
};

/// A packed shard. The index and the data file's header are memory-mapped; read() copies its item
/// out of the data file with pread (which costs a copy of the encoded bytes, a few percent of
/// their decode) so that a file truncated in place during an epoch is an error naming the item,
/// not a SIGBUS in the decoder. Samples own their bytes and may outlive the dataset.
///
/// Everything is validated at construction (magic, version, sizes, every item inside the data
/// file, every name inside the string table, labels, the pair's pack id, the checksum), so that
/// read() cannot run off the mapping.
///
/// Thread-safety: immutable after construction; read() may be called from any number of threads.
/// A data file truncated while open makes the reads of the items it lost throw (skipped and named
/// under OnError::skip); the index must not be rewritten in place while open (its mapping would
/// fail with SIGBUS). PackWriter replaces both files by renaming, which is safe: open datasets keep
/// the old files.
class PackedDataset final : public Dataset {
 public:
  /// Opens `path` (the data file X.stoke; the index X.stoke.idx is found beside it; passing the
  /// .idx path works too). Throws std::runtime_error naming the file and the likely cause, e.g.
  /// "X.stoke.idx: item 17 points past the end of X.stoke (truncated copy?)".
  explicit PackedDataset(std::filesystem::path path, PackedOptions options = {});
  ~PackedDataset() override;

  std::size_t size() const noexcept override { return count_; }
  int label(std::size_t i) const override;
  /// The name stored with the item, or "X.stoke#i" when it has none.
  std::string name(std::size_t i) const override;
  /// The item's bytes as a view into the mapped data file (Encoding::encoded).
  Sample read(std::size_t i) const override;
  const std::vector<std::string>& classes() const noexcept override { return classes_; }

  /// The shorter side the images were resized to when packed; 0 when they are the original files.
  std::uint32_t resize() const noexcept { return resize_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  const std::filesystem::path& index_path() const noexcept { return index_path_; }
  /// Bytes of the data file.
  std::uint64_t data_size() const noexcept;

 private:
  struct Record {
    std::uint64_t offset;
    std::uint64_t size;
    std::uint64_t name_offset;
    std::uint32_t name_size;
    std::int32_t label;
  };
  Record record(std::size_t i) const;  // i < size(), unchecked
  void check(std::size_t i) const;

  std::filesystem::path path_;
  std::filesystem::path index_path_;
  PackedOptions options_;
  std::shared_ptr<const detail::MappedFile> data_;
  std::shared_ptr<const detail::MappedFile> index_;
  std::size_t count_ = 0;
  std::uint32_t resize_ = 0;
  std::vector<std::string> classes_;
  std::size_t strings_at_ = 0;  // offset of the string table in the index
};

/// What PackWriter::finish() wrote.
struct PackSummary {
  std::filesystem::path data;
  std::filesystem::path index;
  std::size_t items = 0;
  std::uint64_t data_bytes = 0;   ///< size of the data file
  std::uint64_t index_bytes = 0;  ///< size of the index file
};

/// Writes a packed shard. Items go to temporary files beside the destination; finish() writes the
/// index, flushes both files to disk and renames them to X.stoke then X.stoke.idx, so a pack that
/// is interrupted (an exception, a signal, a crash) never leaves a half-written shard under the
/// final names. Destroying a writer without finish() removes its temporary files (a crash leaves
/// them as X.stoke.tmp-*). An existing pack at the destination is replaced only by finish().
///
/// Not thread-safe: add() from one thread (e.g. an ordered serial sink).
class PackWriter {
 public:
  /// `path`: the data file to write (X.stoke); `classes`: class names by label (may be empty);
  /// `resize`: recorded in the header (the shorter side images were resized to, 0 for none).
  /// Throws std::runtime_error naming the file when the temporary files cannot be created.
  explicit PackWriter(std::filesystem::path path, std::vector<std::string> classes = {}, std::uint32_t resize = 0);
  ~PackWriter();
  PackWriter(const PackWriter&) = delete;
  PackWriter& operator=(const PackWriter&) = delete;

  /// Appends one item. `label`: -1 or, when there are classes, below classes.size() (else
  /// std::invalid_argument). Throws std::runtime_error naming the file on a write error (e.g.
  /// no space left).
  void add(std::span<const std::byte> bytes, int label, std::string_view name);
  /// Writes the index, syncs, and moves both files to their final names. Call once.
  PackSummary finish();

  std::size_t items() const noexcept { return items_; }
  /// Bytes written to the data file so far (its header included).
  std::uint64_t data_bytes() const noexcept;

 private:
  class File;

  std::filesystem::path path_;
  std::vector<std::string> classes_;
  std::uint32_t resize_;
  std::uint64_t pack_id_;
  std::unique_ptr<File> data_;
  std::vector<std::byte> records_;
  std::string strings_;
  std::size_t items_ = 0;
  bool finished_ = false;
};

}  // namespace stoke::nodes
