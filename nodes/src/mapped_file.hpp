// MappedFile: a read-only memory mapping of a whole file (private to stoke::nodes).
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace stoke::nodes::detail {

/// Maps a whole file read-only (PROT_READ, MAP_PRIVATE) and unmaps it on destruction. Move-only.
/// An empty file gives an empty span (nothing is mapped). Reading the bytes is thread-safe.
/// Datasets hold it in a std::shared_ptr so that Bytes views into it keep it alive.
class MappedFile {
 public:
  /// Throws std::runtime_error naming `path` and the OS error when it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
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

 private:
  void release() noexcept;

  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace stoke::nodes::detail
