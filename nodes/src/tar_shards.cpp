#include "stoke/nodes/tar_shards.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "archive_support.hpp"
#include "dataset_support.hpp"
#include "file_format.hpp"
#include "image_files.hpp"
#include "mapped_file.hpp"
#include "stoke/graph/atomic_file.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

// ---- the index: what libarchive saw in one shard, in tar order --------------------------------

namespace detail {

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

}  // namespace detail

using detail::TarEntry;
using detail::TarEntryKind;
using detail::TarIndex;

namespace {

constexpr char tar_index_magic[8] = {'S', 'T', 'O', 'K', 'E', 'T', 'A', 'R'};
constexpr std::size_t tar_index_header_size = 64;
constexpr std::size_t entry_record_size = 40;
constexpr std::size_t tar_checksum_at = 56;
constexpr std::int32_t no_label = -1;
constexpr std::int32_t bad_label = -2;
constexpr std::uint32_t no_field = 0xffffffffU;
using detail::archive_error;
using detail::fnv1a;
using detail::get_u32;
using detail::get_u64;
using detail::put_u32;
using detail::put_u64;

using detail::max_text_label;
using detail::str;

std::string at_byte(std::uint64_t offset) { return "byte " + std::to_string(offset); }

/// A member's key and field: "train/000017.mask.png" -> "train/000017", "mask.png". Empty field
/// when the base name has no '.'; `hidden` when it starts with one.
struct KeyField {
  std::string_view key;
  std::string_view field;
  bool hidden = false;
};

KeyField split_member(std::string_view name) {
  const std::size_t slash = name.rfind('/');
  const std::size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  if (base < name.size() && name[base] == '.') return {name, {}, true};
  const std::size_t dot = name.find('.', base);
  if (dot == std::string_view::npos) return {name, {}, false};
  return {name.substr(0, dot), name.substr(dot + 1), false};
}

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

struct FileStat {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
};

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

}  // namespace

// ---- building an index with libarchive ---------------------------------------------------------

namespace {

TarEntry note(TarEntryKind kind, std::uint64_t offset, std::string name, std::string reason) {
  TarEntry entry;
  entry.kind = kind;
  entry.offset = offset;
  entry.name = std::move(name);
  entry.reason = std::move(reason);
  return entry;
}

/// Indexes the tar in `data` (the mapped shard): every regular member's data offset and size, in
/// tar order, with what was left out and the damage found on the way. Only headers are read (and
/// .cls members). Throws std::runtime_error naming `shard` when it is compressed.
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

// ---- the index file --------------------------------------------------------------------------

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

std::optional<TarIndex> load_index(const fs::path& file, std::uint64_t size, std::int64_t mtime_ns) {
  std::error_code error;
  if (!fs::is_regular_file(file, error)) return std::nullopt;
  try {
    return parse_index(read_file(file.string()), size, mtime_ns);
  } catch (const std::runtime_error&) {
    return std::nullopt;  // unreadable: treated as missing, and rebuilt
  }
}

/// Writes `bytes` to `file` atomically. Returns "" on success, else why not. No fsync: the index
/// is a cache; one cut short by a crash fails its checksum and is rebuilt.
std::string write_atomically(const fs::path& file, std::span<const std::byte> bytes) {
  try {
    graph::write_file_atomically(file, bytes, "shard index");
    return "";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}

/// The index file's name in a cache folder: a hash of the shard's absolute path, then its name.
fs::path cached_index_name(const fs::path& shard) {
  std::error_code error;
  fs::path absolute = fs::absolute(shard, error);
  if (error) absolute = shard;
  const std::string text = absolute.lexically_normal().string();
  char hash[20];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(fnv1a(std::as_bytes(std::span(text.data(), text.size())))));
  return fs::path(std::string(hash) + "-" + shard.filename().string() + ".stoke-idx");
}

// ---- shard patterns -------------------------------------------------------------------------

/// Expands the first (outermost, leftmost) brace group of `pattern`, recursively.
void expand_braces(const std::string& pattern, std::vector<std::string>& out, std::string_view whole) {
  const std::size_t open = pattern.find('{');
  if (open == std::string::npos) {
    if (pattern.find('}') != std::string::npos) {
      throw std::invalid_argument("shard pattern '" + std::string(whole) + "': '}' without '{'");
    }
    out.push_back(pattern);
    return;
  }
  std::size_t close = open;
  std::vector<std::size_t> commas;
  int depth = 0;
  for (std::size_t i = open; i < pattern.size(); ++i) {
    if (pattern[i] == '{') ++depth;
    if (pattern[i] == '}' && --depth == 0) {
      close = i;
      break;
    }
    if (pattern[i] == ',' && depth == 1) commas.push_back(i);
  }
  if (depth != 0) throw std::invalid_argument("shard pattern '" + std::string(whole) + "': '{' without '}'");
  const std::string head = pattern.substr(0, open);
  const std::string tail = pattern.substr(close + 1);
  const std::string body = pattern.substr(open + 1, close - open - 1);
  std::vector<std::string> choices;
  if (!commas.empty()) {
    std::size_t from = open + 1;
    for (const std::size_t comma : commas) {
      choices.push_back(pattern.substr(from, comma - from));
      from = comma + 1;
    }
    choices.push_back(pattern.substr(from, close - from));
  } else if (const std::size_t dots = body.find(".."); dots != std::string::npos) {
    const std::string first = body.substr(0, dots);
    const std::string last = body.substr(dots + 2);
    const auto number = [&](const std::string& text) {
      unsigned long long value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (text.empty() || error != std::errc{} || end != text.data() + text.size()) {
        throw std::invalid_argument("shard pattern '" + std::string(whole) + "': range {" + body +
                                    "} must be {first..last} with decimal numbers");
      }
      return value;
    };
    const unsigned long long lo = number(first);
    const unsigned long long hi = number(last);
    if (hi < lo || hi - lo >= 10000000ULL) {
      throw std::invalid_argument("shard pattern '" + std::string(whole) + "': range {" + body +
                                  "} must go up, with fewer than 10 million values");
    }
    const int width = first.size() > 1 && first[0] == '0' ? static_cast<int>(first.size()) : 0;
    for (unsigned long long v = lo; v <= hi; ++v) {
      char text[32];
      std::snprintf(text, sizeof text, "%0*llu", width, v);
      choices.emplace_back(text);
    }
  } else {
    choices.push_back("{" + body + "}");  // no comma and no range: literal braces, as in bash
    for (const std::string& choice : choices) {
      std::vector<std::string> rest;
      expand_braces(tail, rest, whole);
      for (const std::string& r : rest) out.push_back(head + choice + r);
    }
    return;
  }
  for (const std::string& choice : choices) expand_braces(head + choice + tail, out, whole);
}

bool has_wildcard(std::string_view text) { return text.find_first_of("*?[") != std::string_view::npos; }

}  // namespace

fs::path tar_index_path(const fs::path& shard) {
  fs::path index = shard;
  index += ".stoke-idx";
  return index;
}

fs::path default_tar_index_cache() {
  if (const char* cache = std::getenv("STOKE_CACHE"); cache != nullptr && *cache != '\0') {
    return fs::path(cache) / "tar-index";
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return fs::path(xdg) / "stoke" / "tar-index";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return fs::path(home) / ".cache" / "stoke" / "tar-index";
  }
  return {};
}

std::vector<fs::path> expand_shard_pattern(std::string_view pattern) {
  std::vector<std::string> expanded;
  expand_braces(std::string(pattern), expanded, pattern);
  std::set<std::string> paths;
  for (const std::string& path : expanded) {
    if (!has_wildcard(path)) {
      paths.insert(path);
      continue;
    }
    glob_t found{};
    const int status = ::glob(path.c_str(), 0, nullptr, &found);
    if (status == 0) {
      for (std::size_t i = 0; i < found.gl_pathc; ++i) paths.insert(found.gl_pathv[i]);
    }
    ::globfree(&found);
    if (status == GLOB_NOMATCH) {
      throw std::runtime_error("shard pattern '" + std::string(pattern) + "': '" + path + "' matches no file");
    }
    if (status != 0)
      throw std::runtime_error("shard pattern '" + std::string(pattern) + "': cannot list '" + path + "'");
  }
  return {paths.begin(), paths.end()};
}

bool is_tar_shard_name(const fs::path& path) {
  const std::string name = detail::lower_ascii(path.filename().string());
  for (const char* suffix : {".tar", ".tgz", ".tar.gz", ".tar.zst", ".tar.bz2", ".tar.xz", ".tar.lz4"}) {
    const std::size_t n = std::strlen(suffix);
    if (name.size() > n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

// ---- TarShards ------------------------------------------------------------------------------

namespace {

/// The .tar files of `folder` (sorted); its other entries go to `ignored`.
std::vector<fs::path> list_shards(const fs::path& folder, std::vector<IgnoredFile>& ignored) {
  std::vector<fs::path> shards;
  std::vector<std::string> compressed;
  std::error_code error;
  for (const fs::directory_entry& entry : detail::sorted_entries(folder, "TarShards")) {
    const fs::path& path = entry.path();
    const std::string name = path.filename().string();
    const bool is_index = name.ends_with(".stoke-idx") || name.find(".stoke-idx.tmp-") != std::string::npos;
    if (is_index) continue;
    if (detail::is_hidden(path)) {
      ignored.push_back({str(path), "hidden (name starts with '.')"});
      continue;
    }
    if (entry.is_directory(error)) {
      ignored.push_back({str(path), "a folder: shards in subfolders are not read (list them, or give the folder)"});
      continue;
    }
    if (detail::lower_ascii(path.extension().string()) == ".tar") {
      shards.push_back(path);
    } else if (is_tar_shard_name(path)) {
      compressed.push_back(name);
      ignored.push_back({str(path), "a compressed shard: tar shards must be uncompressed to be read by offset"});
    } else {
      ignored.push_back({str(path), "not a .tar shard"});
    }
  }
  if (shards.empty()) {
    std::string message = "TarShards: '" + str(folder) + "' has no .tar shard";
    if (!compressed.empty()) {
      message += "; its compressed shards (" + compressed.front() + (compressed.size() > 1 ? ", ..." : "") +
                 ") cannot be read by offset: decompress them (e.g. `gzip -d`, `zstd -d`)";
    }
    throw std::runtime_error(message);
  }
  return shards;
}

}  // namespace

TarShards::TarShards(const fs::path& shard_or_folder, TarShardsOptions options)
    : TarShards(std::vector<fs::path>{shard_or_folder}, std::move(options)) {}

TarShards::TarShards(std::vector<fs::path> shards, TarShardsOptions options) : access_(options.access) {
  if (shards.empty()) throw std::invalid_argument("TarShards: no shard given");
  std::vector<fs::path> files;
  for (const fs::path& path : shards) {
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (status.type() == fs::file_type::not_found) {
      throw std::runtime_error("TarShards: '" + str(path) + "' does not exist (give .tar shards or a folder of them)");
    }
    if (fs::is_directory(status)) {
      for (fs::path& shard : list_shards(path, ignored_)) files.push_back(std::move(shard));
    } else {
      files.push_back(path);
    }
  }
  std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) { return a.native() < b.native(); });
  for (std::size_t i = 1; i < files.size(); ++i) {
    if (files[i].lexically_normal() == files[i - 1].lexically_normal()) {
      throw std::runtime_error("TarShards: shard '" + str(files[i]) + "' is given twice");
    }
  }
  if (files.size() >= no_field) throw std::runtime_error("TarShards: too many shards");

  std::map<std::string, std::string> unused_first;
  for (const fs::path& file : files) add_shard(file, options, unused_first);

  for (const auto& [field, count] : unused_fields_) {
    ignored_.push_back({unused_first[field], "field '" + field + "' is not read (" + std::to_string(count) +
                                                 (count == 1 ? " member has it)" : " members have it)")});
  }
  if (items_.empty()) {
    std::string message = "TarShards: no sample in " + std::to_string(files.size()) + " shard" +
                          (files.size() == 1 ? " '" + str(files.front()) + "'" : "s");
    std::size_t listed = 0;
    for (const IgnoredFile& file : ignored_) {
      if (listed++ == 3) break;
      message += (listed == 1 ? ": " : "; ") + file.path + ": " + file.reason;
    }
    throw std::runtime_error(message);
  }
  int largest = -1;
  for (const Item& item : items_) largest = std::max(largest, static_cast<int>(item.label));
  for (int c = 0; c <= largest; ++c) classes_.push_back(std::to_string(c));
}

TarShards::~TarShards() = default;

void TarShards::add_shard(const fs::path& path, const TarShardsOptions& options,
                          std::map<std::string, std::string>& unused_first) {
  const std::string name = str(path);
  int error = 0;
  const std::optional<FileStat> before = stat_file(path, error);
  if (!before) {
    throw std::runtime_error("TarShards: cannot open shard '" + name +
                             "': " + (error == EINVAL ? std::string("not a regular file") : std::strerror(error)));
  }
  auto map = std::make_shared<const detail::MappedFile>(path);
  const std::optional<FileStat> after = stat_file(path, error);
  if (!after || after->size != map->size() || after->mtime_ns != before->mtime_ns || after->inode != before->inode) {
    throw std::runtime_error("TarShards: shard '" + name + "' changed while it was being opened; open it again");
  }

  std::vector<fs::path> places;  // where its index file may be, in order
  if (!options.index_dir.empty()) {
    places.push_back(options.index_dir / cached_index_name(path));
  } else {
    places.push_back(tar_index_path(path));
    if (!options.fallback_index_dir.empty()) places.push_back(options.fallback_index_dir / cached_index_name(path));
  }

  TarShardInfo info;
  info.path = path;
  info.bytes = after->size;
  std::optional<TarIndex> index;
  for (const fs::path& place : places) {
    index = load_index(place, after->size, after->mtime_ns);
    if (index) {
      info.index = place;
      info.source = TarIndexSource::loaded;
      break;
    }
  }
  if (!index) {
    index = TarIndex{after->size, after->mtime_ns, index_tar(map->bytes(), name)};
    info.source = TarIndexSource::memory;
    std::string failures;
    if (options.write_index) {
      const std::vector<std::byte> bytes = serialize(*index);
      for (const fs::path& place : places) {
        std::error_code dir_error;
        if (place.has_parent_path()) fs::create_directories(place.parent_path(), dir_error);
        const std::string why = write_atomically(place, bytes);
        if (why.empty()) {
          info.index = place;
          info.source = TarIndexSource::written;
          break;
        }
        failures += (failures.empty() ? "" : "; ") + why;
      }
      if (info.source == TarIndexSource::memory && !options.allow_memory_index) {
        throw std::runtime_error("TarShards: cannot write an index of shard '" + name + "' (" + failures +
                                 "): make one of these folders writable, set STOKE_CACHE, or allow in-memory indexes");
      }
    }
  }

  if (options.access == PackAccess::sequential) {
    map->advise_sequential();
  } else {
    map->advise_random();
  }
  const auto shard = static_cast<std::uint32_t>(shards_.size());
  info.first = items_.size();
  maps_.push_back(std::move(map));
  files_.push_back({after->device, after->inode});
  shards_.push_back(std::move(info));
  add_samples(*index, shard, options, unused_first);
  shards_.back().samples = items_.size() - shards_.back().first;
}

std::uint32_t TarShards::field_id(std::string_view field) {
  for (std::size_t f = 0; f < fields_.size(); ++f) {
    if (fields_[f] == field) return static_cast<std::uint32_t>(f);
  }
  fields_.emplace_back(field);
  return static_cast<std::uint32_t>(fields_.size() - 1);
}

void TarShards::add_samples(const TarIndex& index, std::uint32_t shard, const TarShardsOptions& options,
                            std::map<std::string, std::string>& unused_first) {
  const std::set<std::string> extensions = detail::extension_set(options.image_extensions, "TarShards");
  const std::string prefix = str(shards_[shard].path) + "#";

  struct Pending {
    std::string key;
    Item item;
    bool open = false;
    bool has_image = false;
    bool has_label = false;
    bool label_bad = false;
    std::string fields;  // for the report of a sample without an image
  } pending;

  const auto finish = [&]() {
    if (!pending.open) return;
    pending.open = false;
    if (!pending.has_image) {
      std::string known;
      for (const std::string& extension : extensions) known += (known.empty() ? "" : " ") + extension;
      ignored_.push_back({prefix + pending.key, "no image member (its fields: " + pending.fields +
                                                    "; an image's field ends in one of: " + known + ")"});
      return;
    }
    if (pending.label_bad) {
      ignored_.push_back(
          {prefix + pending.key + ".cls", "not a decimal class label in 0.." + std::to_string(max_text_label)});
      return;
    }
    pending.item.key_offset = keys_.size();
    pending.item.key_size = static_cast<std::uint32_t>(pending.key.size());
    keys_ += pending.key;
    items_.push_back(pending.item);
  };
  const auto drop = [&](const std::string& why) {
    if (!pending.open) return;
    pending.open = false;
    ignored_.push_back({prefix + pending.key, why});
  };

  for (const TarEntry& entry : index.entries) {
    if (entry.kind == TarEntryKind::left_out) {
      ignored_.push_back({prefix + entry.name, entry.reason});
      continue;
    }
    if (entry.kind == TarEntryKind::damage) {
      ignored_.push_back({entry.name.empty() ? str(shards_[shard].path) : prefix + entry.name, entry.reason});
      // A member cut short by the end of the shard names its sample: the sample in progress is
      // complete when the cut member starts another one. Any other damage may have taken a member
      // of the sample in progress.
      if (!entry.name.empty() && pending.open && split_member(entry.name).key != pending.key) {
        finish();
      } else {
        drop("left out: the damage at " + at_byte(entry.offset) + " may have cut one of its members");
      }
      continue;
    }
    const KeyField split = split_member(entry.name);
    if (split.hidden) {
      ignored_.push_back({prefix + entry.name, "hidden (name starts with '.')"});
      continue;
    }
    if (split.field.empty()) {
      ignored_.push_back({prefix + entry.name, "no field: its name has no '.' (WebDataset names are key.field)"});
      continue;
    }
    if (!pending.open || split.key != pending.key) {
      finish();
      pending = Pending{};
      pending.open = true;
      pending.key = std::string(split.key);
      pending.item.shard = shard;
      pending.item.image_field = no_field;
      pending.item.mask_field = no_field;
    }
    pending.fields += (pending.fields.empty() ? "" : " ") + std::string(split.field);
    const Member member{entry.offset, entry.size};
    const std::string_view field = split.field;
    const std::size_t dot = field.rfind('.');
    const std::string extension =
        detail::lower_ascii(std::string(dot == std::string_view::npos ? field : field.substr(dot + 1)));
    if (field.starts_with("mask.") && pending.item.mask_field == no_field) {
      pending.item.mask = member;
      pending.item.mask_field = field_id(field);
    } else if (field == "cls" && !pending.has_label) {
      pending.has_label = true;
      pending.label_bad = entry.value == bad_label;
      pending.item.label = entry.value >= 0 ? entry.value : no_label;
    } else if (field == "json" && !pending.item.has_json) {
      pending.item.json = member;
      pending.item.has_json = true;
    } else if (!field.starts_with("mask.") && !pending.has_image && extensions.count(extension) != 0) {
      pending.item.image = member;
      pending.item.image_field = field_id(field);
      pending.has_image = true;
    } else {
      const std::string name(field);
      if (unused_fields_[name]++ == 0) unused_first[name] = prefix + entry.name;
    }
  }
  finish();
}

const TarShards::Item& TarShards::item(std::size_t i) const {
  if (i >= items_.size()) detail::item_out_of_range("TarShards", i, items_.size());
  return items_[i];
}

int TarShards::label(std::size_t i) const { return item(i).label; }

std::string_view TarShards::key(std::size_t i) const {
  const Item& it = item(i);
  return std::string_view(keys_).substr(it.key_offset, it.key_size);
}

std::size_t TarShards::shard_of(std::size_t i) const { return item(i).shard; }

std::string TarShards::name(std::size_t i) const {
  const Item& it = item(i);
  return str(shards_[it.shard].path) + "#" + std::string(key(i));
}

Bytes TarShards::member_bytes(const Item& it, const Member& member, std::string_view field) const {
  const detail::MappedFile& map = *maps_[it.shard];
  const auto member_name = [&]() {
    return str(shards_[it.shard].path) + "#" + std::string(keys_.substr(it.key_offset, it.key_size)) + "." +
           std::string(field);
  };
  if (member.offset > map.size() || member.size > map.size() - member.offset) {
    throw std::runtime_error(member_name() + ": its bytes lie outside the shard (corrupt index)");
  }
  // A shard truncated in place since it was opened would make the lost pages fail with SIGBUS:
  // check the file's size first (the same file: one replaced by rename leaves the mapping intact).
  int error = 0;
  if (const std::optional<FileStat> now = stat_file(shards_[it.shard].path, error);
      now && now->device == files_[it.shard].first && now->inode == files_[it.shard].second &&
      member.offset + member.size > now->size) {
    throw std::runtime_error(member_name() + ": its " + std::to_string(member.size) + " bytes from " +
                             at_byte(member.offset) + " are not all in the shard, which is now " +
                             std::to_string(now->size) + " bytes (truncated since it was opened?)");
  }
  if (access_ == PackAccess::random)
    map.prefetch(static_cast<std::size_t>(member.offset), static_cast<std::size_t>(member.size));
  return Bytes(maps_[it.shard],
               map.bytes().subspan(static_cast<std::size_t>(member.offset), static_cast<std::size_t>(member.size)));
}

Sample TarShards::read(std::size_t i) const {
  const Item& it = item(i);
  Sample sample;
  sample.bytes = member_bytes(it, it.image, fields_[it.image_field]);
  sample.encoding = Encoding::encoded;
  sample.label = it.label;
  sample.index = i;
  sample.name = name(i);
  if (it.mask_field != no_field) {
    sample.mask = member_bytes(it, it.mask, fields_[it.mask_field]);
    sample.mask_name = sample.name + "." + fields_[it.mask_field];
  }
  if (it.has_json) {
    const Bytes json = member_bytes(it, it.json, "json");
    const std::string json_name = sample.name + ".json";
    nlohmann::json object;
    try {
      const char* text = reinterpret_cast<const char*>(json.data());
      object = nlohmann::json::parse(text, text + json.size());
    } catch (const nlohmann::json::exception& error) {
      throw std::runtime_error(json_name + ": not JSON: " + error.what());
    }
    if (!object.is_object()) throw std::runtime_error(json_name + ": not a JSON object ({\"name\": number, ...})");
    for (const auto& [key, value] : object.items()) {
      if (value.is_number()) {
        sample.targets[key] = Target{{}, {value.get<float>()}};
      } else if (value.is_array() &&
                 std::all_of(value.begin(), value.end(), [](const nlohmann::json& v) { return v.is_number(); })) {
        Target target{{static_cast<std::int64_t>(value.size())}, {}};
        target.values.reserve(value.size());
        for (const nlohmann::json& v : value) target.values.push_back(v.get<float>());
        sample.targets[key] = std::move(target);
      }
    }
  }
  return sample;
}

}  // namespace stoke::nodes
