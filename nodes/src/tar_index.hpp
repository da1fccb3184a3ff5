// The index of one tar shard, internal to nodes: what libarchive saw in it, in tar order (every
// regular member's data offset and size, the entries left out, the damage), built by index_tar and
// kept in a file beside the shard or in a cache folder (serialize, load_index). TarShards
// (tar_shards.cpp) turns indexes into samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace stoke::nodes::detail {

enum class TarEntryKind : std::uint32_t {
  member = 0,    // a regular file: its data's offset and size
  left_out = 1,  // an entry that is not a member (a link, a sparse file): name and reason
  damage = 2,    // where the shard is damaged: the byte, the member cut (if known) and what happened
};

struct TarEntry {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::string name;
  std::string reason;
  TarEntryKind kind = TarEntryKind::member;
  std::int32_t value = -1;  // a .cls member's label; -2: not a label
};

struct TarIndex {
  std::uint64_t shard_size = 0;
  std::int64_t mtime_ns = 0;
  std::vector<TarEntry> entries;
};

/// A .cls member's value when it is not a label, and when the member is no .cls at all.
inline constexpr std::int32_t no_label = -1;
inline constexpr std::int32_t bad_label = -2;

/// "byte <offset>", as the reasons name a place in a shard.
std::string at_byte(std::uint64_t offset);

/// A member's key and field: "train/000017.mask.png" -> "train/000017", "mask.png". Empty field
/// when the base name has no '.'; `hidden` when it starts with one.
struct KeyField {
  std::string_view key;
  std::string_view field;
  bool hidden = false;
};
KeyField split_member(std::string_view name);

struct FileStat {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
};
/// The size, mtime, device and inode of the regular file at `path`; nothing with `error` set to
/// errno (EINVAL for what is not a regular file).
std::optional<FileStat> stat_file(const std::filesystem::path& path, int& error);

/// Indexes the tar in `data` (the mapped shard): every regular member's data offset and size, in
/// tar order, with what was left out and the damage found on the way. Only headers are read (and
/// .cls members). Throws std::runtime_error naming `shard` when it is compressed.
std::vector<TarEntry> index_tar(std::span<const std::byte> data, const std::string& shard);

/// The index file's bytes (tar_index_format_version; a checksum covers them).
std::vector<std::byte> serialize(const TarIndex& index);
/// The index in `file` when it is a valid index of a shard of `size` bytes modified at
/// `mtime_ns`; nothing when it is missing, unreadable, stale or damaged (the caller rebuilds it).
std::optional<TarIndex> load_index(const std::filesystem::path& file, std::uint64_t size, std::int64_t mtime_ns);
/// The index in `bytes` when it is a valid index of a shard of `size` bytes, whatever modification
/// time it was made at (a remote shard's index, fetched beside it: objects have no mtime to match).
std::optional<TarIndex> parse_index_of_size(std::span<const std::byte> bytes, std::uint64_t size);
/// Writes `bytes` to `file` atomically. Returns "" on success, else why not. No fsync: the index
/// is a cache; one cut short by a crash fails its checksum and is rebuilt.
std::string write_atomically(const std::filesystem::path& file, std::span<const std::byte> bytes);
/// The index file's name in a cache folder: a hash of the shard's absolute path (a URL's text as it
/// is), then its name.
std::filesystem::path cached_index_name(const std::filesystem::path& shard);

}  // namespace stoke::nodes::detail
