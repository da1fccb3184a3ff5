// The tar shard index (tar_index.hpp): built with libarchive from the headers, written to and read
// from its file.
#include "tar_index.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <stoke/remote/url.hpp>
#include <system_error>
#include <utility>

#include "archive_support.hpp"
#include "dataset_support.hpp"
#include "file_format.hpp"
#include "mapped_file.hpp"
#include "stoke/base/atomic_file.hpp"
#include "stoke/base/cache_folder.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

namespace {

constexpr char tar_index_magic[8] = {'S', 'T', 'O', 'K', 'E', 'T', 'A', 'R'};
constexpr std::size_t tar_index_header_size = 64;
constexpr std::size_t entry_record_size = 40;
constexpr std::size_t tar_checksum_at = 56;
using detail::archive_error;
using detail::bad_label;
using detail::fnv1a;
using detail::get_u32;
using detail::get_u64;
using detail::max_text_label;
using detail::put_u32;
using detail::put_u64;
using detail::str;
using detail::TarEntry;
using detail::TarEntryKind;
using detail::TarIndex;

/// A .cls member's label: a decimal integer in 0..max_text_label, spaces and line ends around it.
std::int32_t parse_label(std::span<const std::byte> bytes) {
  if (bytes.size() > 64) return bad_label;
  std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  int label = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), label);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || label < 0 || label > max_text_label) {
    return bad_label;
  }
  return label;
}

std::string compressed_error(const std::string& shard, const std::string& filter) {
  return shard + ": compressed with " + filter +
         "; tar shards are read by offset and must be uncompressed tar: decompress it (e.g. `gzip -d`, `zstd -d`), "
         "or write uncompressed shards";
}

TarEntry note(TarEntryKind kind, std::uint64_t offset, std::string name, std::string reason) {
  TarEntry entry;
  entry.kind = kind;
  entry.offset = offset;
  entry.name = std::move(name);
  entry.reason = std::move(reason);
  return entry;
}

/// The index in `bytes` when it is a valid index of a shard of `size` bytes modified at `mtime_ns`
/// whose members all lie inside the shard; otherwise nothing (the caller rebuilds it).
std::optional<TarIndex> parse_index(std::span<const std::byte> bytes, std::uint64_t size, std::int64_t mtime_ns) {
  if (bytes.size() < tar_index_header_size) return std::nullopt;
  const std::byte* header = bytes.data();
  if (std::memcmp(header, tar_index_magic, sizeof tar_index_magic) != 0) return std::nullopt;
  if (get_u32(header + 8) != tar_index_format_version || get_u32(header + 12) != tar_index_header_size) {
    return std::nullopt;
  }
  if (get_u64(header + 16) != size || static_cast<std::int64_t>(get_u64(header + 24)) != mtime_ns) {
    return std::nullopt;
  }
  const std::uint64_t count = get_u64(header + 32);
  const std::uint64_t strings_size = get_u64(header + 40);
  if (count > bytes.size() / entry_record_size || strings_size > bytes.size() ||
      tar_index_header_size + entry_record_size * count + strings_size != bytes.size()) {
    return std::nullopt;
  }
  if (fnv1a(bytes, tar_checksum_at) != get_u64(header + tar_checksum_at)) return std::nullopt;
  const char* strings = reinterpret_cast<const char*>(bytes.data() + tar_index_header_size + entry_record_size * count);
  TarIndex index{size, mtime_ns, {}};
  index.entries.reserve(static_cast<std::size_t>(count));
  for (std::uint64_t e = 0; e < count; ++e) {
    const std::byte* at = bytes.data() + tar_index_header_size + entry_record_size * e;
    TarEntry entry;
    entry.offset = get_u64(at);
    entry.size = get_u64(at + 8);
    const std::uint64_t text_at = get_u64(at + 16);
    const std::uint64_t name_size = get_u32(at + 24);
    const std::uint64_t reason_size = get_u32(at + 28);
    const std::uint32_t kind = get_u32(at + 32);
    entry.value = static_cast<std::int32_t>(get_u32(at + 36));
    if (kind > static_cast<std::uint32_t>(TarEntryKind::damage)) return std::nullopt;
    entry.kind = static_cast<TarEntryKind>(kind);
    if (text_at > strings_size || name_size + reason_size > strings_size - text_at) return std::nullopt;
    if (entry.kind == TarEntryKind::member && (entry.offset > size || entry.size > size - entry.offset ||
                                               entry.value < bad_label || entry.value > max_text_label)) {
      return std::nullopt;
    }
    entry.name.assign(strings + text_at, name_size);
    entry.reason.assign(strings + text_at + name_size, reason_size);
    index.entries.push_back(std::move(entry));
  }
  return index;
}

}  // namespace

namespace detail {

std::string at_byte(std::uint64_t offset) { return "byte " + std::to_string(offset); }

KeyField split_member(std::string_view name) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  if (base < name.size() && name[base] == '.') return {name, {}, true};
  const std::size_t dot = name.find('.', base);
  if (dot == std::string_view::npos) return {name, {}, false};
  return {name.substr(0, dot), name.substr(dot + 1), false};
}

std::optional<FileStat> stat_file(const fs::path& path, int& error) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    error = errno;
    return std::nullopt;
  }
  error = 0;
  if (!S_ISREG(info.st_mode)) {
    error = EINVAL;
    return std::nullopt;
  }
  return FileStat{static_cast<std::uint64_t>(info.st_size),
                  static_cast<std::int64_t>(info.st_mtim.tv_sec) * 1000000000LL + info.st_mtim.tv_nsec,
                  static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino)};
}

std::vector<TarEntry> index_tar(std::span<const std::byte> data, const std::string& shard) {
  std::vector<TarEntry> entries;
  if (data.empty()) {
    entries.push_back(note(TarEntryKind::damage, 0, "", "empty file (0 bytes): not a tar archive"));
    return entries;
  }
  const detail::ArchiveReader owner(archive_read_new());
  archive* a = owner.get();
  if (a == nullptr) throw std::bad_alloc();
  archive_read_support_format_tar(a);
  archive_read_support_filter_all(a);  // to recognise a compressed shard, and refuse it by name
  const int opened = archive_read_open_memory(a, data.data(), data.size());
  if (archive_filter_count(a) > 1 && archive_filter_code(a, 0) != ARCHIVE_FILTER_NONE) {
    throw std::runtime_error(compressed_error(shard, archive_filter_name(a, 0)));
  }
  if (opened != ARCHIVE_OK) {
    entries.push_back(note(TarEntryKind::damage, 0, "",
                           "not readable as a tar archive (libarchive: " + archive_error(a) +
                               "): not a tar file, or its first header is damaged"));
    return entries;
  }

  bool resyncing = false;      // after a damaged header, until the next valid one
  la_int64_t damaged_at = -1;  // the last damaged header's position
  std::uint64_t good_end = 0;  // the end of the last member read
  std::string good_name;       // its name
  for (;;) {
    archive_entry* entry = nullptr;
    const int status = archive_read_next_header(a, &entry);
    if (status == ARCHIVE_EOF) break;
    if (status == ARCHIVE_RETRY) {
      // libarchive's tar reader steps 512 bytes per retry, looking for the next valid header.
      const la_int64_t header_at = archive_read_header_position(a);
      if (header_at < 0 || header_at <= damaged_at) {
        entries.push_back(note(TarEntryKind::damage, good_end, "",
                               "damaged tar data after " + at_byte(good_end) + " (libarchive: " + archive_error(a) +
                                   "): the rest of the shard is left out"));
        break;
      }
      if (!resyncing) {
        entries.push_back(note(TarEntryKind::damage, static_cast<std::uint64_t>(header_at), "",
                               "damaged tar header at " + at_byte(static_cast<std::uint64_t>(header_at)) +
                                   " (libarchive: " + archive_error(a) +
                                   "): the member it describes is lost; reading goes on at the next valid header"));
      }
      damaged_at = header_at;
      resyncing = true;
      continue;
    }
    if (status < ARCHIVE_WARN) {  // ARCHIVE_FATAL: e.g. a header cut in two at the end
      entries.push_back(note(TarEntryKind::damage, good_end, "",
                             "unreadable tar header after " +
                                 (good_name.empty() ? "the start" : "'" + good_name + "'") + " (from " +
                                 at_byte(good_end) + "; libarchive: " + archive_error(a) +
                                 "; truncated copy?): the rest of the shard is left out"));
      break;
    }
    const la_int64_t header_at = archive_read_header_position(a);
    resyncing = false;

    const char* raw_name = archive_entry_pathname(entry);
    if (raw_name == nullptr) raw_name = archive_entry_pathname_utf8(entry);
    std::string name = raw_name != nullptr ? raw_name : "";
    const std::uint64_t at = static_cast<std::uint64_t>(header_at);
    if (name.empty()) {
      entries.push_back(note(TarEntryKind::left_out, at, "@" + std::to_string(at), "a member without a readable name"));
      continue;
    }
    const mode_t type = archive_entry_filetype(entry);
    if (type == AE_IFDIR) continue;
    if (archive_entry_hardlink(entry) != nullptr) {
      entries.push_back(note(TarEntryKind::left_out, at, std::move(name), "a hard link, not a file"));
      continue;
    }
    if (type != AE_IFREG) {
      entries.push_back(note(TarEntryKind::left_out, at, std::move(name), "not a regular file (a link or a device)"));
      continue;
    }
    if (archive_entry_sparse_count(entry) > 0) {
      entries.push_back(
          note(TarEntryKind::left_out, at, std::move(name), "a sparse file: its bytes are not in one piece"));
      continue;
    }
    const la_int64_t data_at = archive_filter_bytes(a, 0);
    const la_int64_t size = archive_entry_size_is_set(entry) != 0 ? archive_entry_size(entry) : 0;
    if (data_at < 0 || size < 0 || static_cast<std::uint64_t>(data_at) > data.size() ||
        static_cast<std::uint64_t>(size) > data.size() - static_cast<std::uint64_t>(data_at)) {
      const std::uint64_t from = data_at < 0 ? at : static_cast<std::uint64_t>(data_at);
      entries.push_back(note(TarEntryKind::damage, from, std::move(name),
                             "cut short: its " + std::to_string(size) + " bytes from " + at_byte(from) +
                                 " run past the end of the shard (" + std::to_string(data.size()) +
                                 " bytes; truncated copy?)"));
      break;
    }
    TarEntry member;
    member.kind = TarEntryKind::member;
    member.offset = static_cast<std::uint64_t>(data_at);
    member.size = static_cast<std::uint64_t>(size);
    if (const KeyField split = split_member(name); !split.hidden && split.field == "cls") {
      member.value = parse_label(data.subspan(member.offset, member.size));
    }
    good_end = member.offset + member.size;
    good_name = name;
    member.name = std::move(name);
    entries.push_back(std::move(member));
  }
  return entries;
}

std::vector<std::byte> serialize(const TarIndex& index) {
  std::vector<std::byte> out;
  out.reserve(tar_index_header_size + entry_record_size * index.entries.size());
  const auto u32 = [&out](std::uint32_t value) {
    out.resize(out.size() + 4);
    put_u32(&out[out.size() - 4], value);
  };
  const auto u64 = [&out](std::uint64_t value) {
    out.resize(out.size() + 8);
    put_u64(&out[out.size() - 8], value);
  };
  for (const char c : tar_index_magic) out.push_back(static_cast<std::byte>(c));
  u32(tar_index_format_version);
  u32(tar_index_header_size);
  u64(index.shard_size);
  u64(static_cast<std::uint64_t>(index.mtime_ns));
  u64(index.entries.size());
  std::uint64_t strings_size = 0;
  for (const TarEntry& entry : index.entries) strings_size += entry.name.size() + entry.reason.size();
  u64(strings_size);
  u64(0);  // reserved
  u64(0);  // the checksum, below
  std::uint64_t text_at = 0;
  for (const TarEntry& entry : index.entries) {
    u64(entry.offset);
    u64(entry.size);
    u64(text_at);
    u32(static_cast<std::uint32_t>(entry.name.size()));
    u32(static_cast<std::uint32_t>(entry.reason.size()));
    u32(static_cast<std::uint32_t>(entry.kind));
    u32(static_cast<std::uint32_t>(entry.value));
    text_at += entry.name.size() + entry.reason.size();
  }
  for (const TarEntry& entry : index.entries) {
    for (const std::string* text : {&entry.name, &entry.reason}) {
      const auto bytes = std::as_bytes(std::span(text->data(), text->size()));
      out.insert(out.end(), bytes.begin(), bytes.end());
    }
  }
  put_u64(&out[tar_checksum_at], fnv1a(out, tar_checksum_at));
  return out;
}

std::optional<TarIndex> parse_index_of_size(std::span<const std::byte> bytes, std::uint64_t size) {
  if (bytes.size() < tar_index_header_size) return std::nullopt;
  return parse_index(bytes, size, static_cast<std::int64_t>(get_u64(bytes.data() + 24)));
}

std::optional<TarIndex> load_index(const fs::path& file, std::uint64_t size, std::int64_t mtime_ns) {
  std::error_code error;
  if (!fs::is_regular_file(file, error)) return std::nullopt;
  try {
    return parse_index(read_file(file.string()), size, mtime_ns);
  } catch (const std::runtime_error&) {
    return std::nullopt;  // unreadable: treated as missing, and rebuilt
  }
}

std::string write_atomically(const fs::path& file, std::span<const std::byte> bytes) {
  try {
    base::write_file_atomically(file, bytes, "shard index");
    return "";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}

fs::path cached_index_name(const fs::path& shard) {
  std::string text = shard.string();  // a URL as it is
  if (!remote::RemoteUrl::is_remote(text)) {
    std::error_code error;
    fs::path absolute = fs::absolute(shard, error);
    if (error) absolute = shard;
    text = absolute.lexically_normal().string();
  }
  char hash[20];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(fnv1a(std::as_bytes(std::span(text.data(), text.size())))));
  return fs::path(std::string(hash) + "-" + shard.filename().string() + ".stoke-idx");
}

}  // namespace detail

fs::path tar_index_path(const fs::path& shard) {
  fs::path index = shard;
  index += ".stoke-idx";
  return index;
}

fs::path default_tar_index_cache() {
  const fs::path folder = base::cache_folder();
  return folder.empty() ? folder : folder / "tar-index";
}

}  // namespace stoke::nodes
