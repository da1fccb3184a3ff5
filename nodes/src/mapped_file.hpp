// MappedFile: a read-only memory mapping of a whole file (private to stoke::nodes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace stoke::nodes::detail {

/// Maps a whole file read-only (PROT_READ, MAP_PRIVATE) and unmaps it on destruction. Move-only.
/// An empty file gives an empty span (nothing is mapped). Reading the bytes is thread-safe.
/// Datasets hold it in a std::shared_ptr so that Bytes views into it keep it alive.
///
/// A file truncated in place while mapped (`cp` over it, a writer that reopens it with O_TRUNC)
/// makes every access to a lost page raise SIGBUS, which no error handling survives. Items read
/// during an epoch therefore come through read_at() (pread from the descriptor kept open), which
/// sees the shorter file and throws; the mapping serves what is checked once at open time. That
/// costs a descriptor per file (keep_open): a dataset of a few large files (a pack) can afford
/// it, one of thousands of shards (TarShards) checks the file's size before each view instead.
class MappedFile {
 public:
  /// Throws std::runtime_error naming `path` and the OS error when it cannot be opened or mapped.
  /// keep_open: keep the file descriptor for read_at().
  explicit MappedFile(const std::filesystem::path& path, bool keep_open = false);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

  /// Access-pattern hints for the whole mapping or a range of it (madvise). Best effort: a failed
  /// hint changes nothing but speed, so errors are ignored.
  void advise_random() const noexcept;
  void advise_sequential() const noexcept;
  /// Starts reading [offset, offset + size) in the background (MADV_WILLNEED).
  void prefetch(std::size_t offset, std::size_t size) const noexcept;

  /// A copy of [offset, offset + size), read with pread (the file was mapped with keep_open).
  /// Throws std::runtime_error naming `what`, the range and the file's size now when the file no
  /// longer holds it (truncated since it was mapped), or the OS error.
  std::vector<std::byte> read_at(std::uint64_t offset, std::size_t size, const std::string& what) const;

 private:
  void release() noexcept;

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;  // with keep_open, for read_at()
};

}  // namespace stoke::nodes::detail
