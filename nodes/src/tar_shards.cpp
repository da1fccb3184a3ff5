// TarShards: WebDataset tar shards as a dataset -- each shard's index (tar_index.hpp) turned into
// samples grouped by key, read in place from the mapped shards.
#include "stoke/nodes/tar_shards.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <stoke/remote/http_client.hpp>
#include <stoke/remote/url.hpp>
#include <system_error>
#include <utility>

#include "dataset_support.hpp"
#include "file_format.hpp"
#include "image_files.hpp"
#include "mapped_file.hpp"
#include "remote_shards.hpp"
#include "tar_index.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

using detail::at_byte;
using detail::bad_label;
using detail::cached_index_name;
using detail::FileStat;
using detail::index_tar;
using detail::KeyField;
using detail::load_index;
using detail::max_text_label;
using detail::no_label;
using detail::split_member;
using detail::stat_file;
using detail::str;
using detail::TarEntry;
using detail::TarEntryKind;
using detail::TarIndex;
using detail::write_atomically;

namespace {

constexpr std::uint32_t no_field = 0xffffffffU;

}  // namespace

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
    if (remote::RemoteUrl::is_remote(path.native())) {  // http(s):// or s3://: read over the network
      files.push_back(path);
      continue;
    }
    std::error_code error;
    const fs::file_status status = fs::status(path, error);
    if (status.type() == fs::file_type::not_found) {
      const std::string missing =
          "TarShards: '" + str(path) + "' does not exist (give .tar shards or a folder of them)";
      if (options.on_shard_error == ShardFailure::fail) throw std::runtime_error(missing);
      ignored_.push_back({str(path), "shard left out (its samples are not counted): " + missing});
      continue;
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
  for (const fs::path& file : files) {
    try {
      if (remote::RemoteUrl::is_remote(file.native())) {
        add_remote_shard(file.native(), options, unused_first);
      } else {
        add_shard(file, options, unused_first);
      }
    } catch (const std::runtime_error& error) {  // remote::FetchError too; not invalid_argument
      if (options.on_shard_error == ShardFailure::fail) throw;
      const bool remote = remote::RemoteUrl::is_remote(file.native());
      ignored_.push_back({remote ? remote::RemoteUrl::parse(file.native()).text() : str(file),
                          std::string("shard left out (its samples are not counted): ") + error.what()});
    }
  }

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
  auto starts = std::make_shared<std::vector<std::uint64_t>>();
  for (const TarShardInfo& shard : shards_) {
    if (shard.samples > 0) starts->push_back(shard.first);
  }
  group_starts_ = std::move(starts);
  window_ = options.window;
  if (remote_ && options.prefetch) {
    std::vector<std::shared_ptr<const remote::RemoteUrl>> order;
    for (const auto& url : urls_) {
      if (url) order.push_back(url);
    }
    remote_->prefetch(std::move(order));
  }
  if (remote_ && window_ > 0) {  // an order by shards: whole shards streamed ahead of the reads
    std::vector<detail::ShardStream::Shard> streamed;
    for (std::size_t s = 0; s < shards_.size(); ++s) streamed.push_back({urls_[s], shards_[s].bytes});
    remote_->start_stream(std::move(streamed));
  }
}

Groups TarShards::groups() const { return {group_starts_, window_}; }

std::shared_ptr<const void> TarShards::will_read(std::span<const std::uint64_t> items) const {
  if (!remote_) return nullptr;
  std::vector<std::uint64_t> reads(shards_.size(), 0);
  std::vector<std::pair<std::size_t, std::uint64_t>> plan;  // shards by first read
  for (const std::uint64_t i : items) {
    const std::size_t shard = item(static_cast<std::size_t>(i)).shard;
    if (reads[shard]++ == 0) plan.emplace_back(shard, 0);
  }
  for (auto& [shard, count] : plan) count = reads[shard];
  return remote_->plan(plan);
}

TarShards::~TarShards() = default;

std::optional<NetworkStats> TarShards::network() const {
  if (!remote_) return std::nullopt;
  return remote_->stats();
}

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
  urls_.push_back(nullptr);
  shards_.push_back(std::move(info));
  add_samples(*index, shard, options, unused_first);
  shards_.back().samples = items_.size() - shards_.back().first;
}

namespace {

// The last segment of a URL's path ("train-000000.tar"), without its query.
std::string last_segment(const std::string& text) {
  const std::string_view path = std::string_view(text).substr(0, text.find_first_of("?#"));
  return std::string(path.substr(path.find_last_of('/') + 1));
}

}  // namespace

void TarShards::add_remote_shard(const std::string& text, const TarShardsOptions& options,
                                 std::map<std::string, std::string>& unused_first) {
  if (!remote_) remote_ = std::make_unique<detail::RemoteShards>(options);
  auto url = std::make_shared<const remote::RemoteUrl>(remote::RemoteUrl::parse(text));
  TarShardInfo info;
  info.path = url->text();                    // without credentials
  info.bytes = remote_->client().size(*url);  // a 404 or a 403 names the URL
  if (remote_->caching() && info.bytes > remote_->budget()) {
    throw std::invalid_argument("TarShards: shard " + url->text() + " (" + std::to_string(info.bytes) +
                                " bytes) does not fit in the cache's budget of " + std::to_string(remote_->budget()) +
                                " bytes: raise cache_bytes (a few shards' worth), or read without a cache");
  }
  const TarIndex index = remote_index(*url, info.bytes, options, info);
  const auto shard = static_cast<std::uint32_t>(shards_.size());
  info.first = items_.size();
  maps_.push_back(nullptr);
  files_.push_back({0, 0});
  urls_.push_back(std::move(url));
  shards_.push_back(std::move(info));
  add_samples(index, shard, options, unused_first);
  shards_.back().samples = items_.size() - shards_.back().first;
}

TarIndex TarShards::remote_index(const remote::RemoteUrl& url, std::uint64_t size, const TarShardsOptions& options,
                                 TarShardInfo& info) {
  const std::string name = url.text();
  // Beside it on the server (written there by a TarShards that read the shard locally), checked by
  // its size: an object has no modification time to match.
  const remote::RemoteUrl beside = url.sibling(last_segment(name) + ".stoke-idx");
  try {
    remote::HttpClient& client = remote_->client();
    if (auto index = detail::parse_index_of_size(client.read(beside, 0, client.size(beside)), size)) {
      info.index = beside.text();
      info.source = TarIndexSource::loaded;
      return std::move(*index);
    }
  } catch (const remote::FetchError& error) {
    if (error.status() != 404 && error.status() != 403) throw;  // none there: made below
  }
  // This machine's cache of indexes, then one download of the shard, indexed as a local one.
  const fs::path folder = options.index_dir.empty() ? options.fallback_index_dir : options.index_dir;
  const fs::path place = folder.empty() ? fs::path() : folder / cached_index_name(fs::path(name));
  if (!place.empty()) {
    if (auto index = load_index(place, size, 0)) {
      info.index = place;
      info.source = TarIndexSource::loaded;
      return std::move(*index);
    }
  }
  TarIndex index{size, 0, {}};
  remote_->with_whole(url, size, [&](std::span<const std::byte> bytes) { index.entries = index_tar(bytes, name); });
  info.source = TarIndexSource::memory;
  if (options.write_index && !place.empty()) {
    std::error_code dir_error;
    fs::create_directories(place.parent_path(), dir_error);
    if (write_atomically(place, serialize(index)).empty()) {
      info.index = place;
      info.source = TarIndexSource::written;
    }
  }
  return index;
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

// A remote sample's members fetched together: one range request from `offset`.
struct detail::FetchedSpan {
  std::shared_ptr<const std::vector<std::byte>> bytes;
  std::uint64_t offset = 0;
};

// A remote sample's members: in its whole shard when that is streamed into memory; else, as they
// lie next to each other in the shard (image, mask, .json a header or two apart), one range
// request over all of them instead of one each.
std::optional<detail::FetchedSpan> TarShards::fetch_together(const Item& it) const {
  if (!urls_[it.shard]) return std::nullopt;
  if (detail::ShardStream::Buffer whole = remote_->held(it.shard)) return detail::FetchedSpan{std::move(whole), 0};
  if (it.mask_field == no_field && !it.has_json) return std::nullopt;
  std::uint64_t begin = it.image.offset, end = it.image.offset + it.image.size, used = it.image.size;
  for (const auto& [member, read] : {std::pair(it.mask, it.mask_field != no_field), std::pair(it.json, it.has_json)}) {
    if (!read) continue;
    begin = std::min(begin, member.offset);
    end = std::max(end, member.offset + member.size);
    used += member.size;
  }
  constexpr std::uint64_t most_between = 64 * 1024;  // headers, and a field not read
  if (end > shards_[it.shard].bytes || end - begin > used + most_between) return std::nullopt;
  auto bytes = std::make_shared<std::vector<std::byte>>(static_cast<std::size_t>(end - begin));
  try {
    remote_->read(*urls_[it.shard], begin, *bytes);
  } catch (const std::runtime_error& error) {
    throw std::runtime_error(name(static_cast<std::size_t>(&it - items_.data())) + ": " + error.what());
  }
  return detail::FetchedSpan{std::move(bytes), begin};
}

Bytes TarShards::member_bytes(const Item& it, const Member& member, std::string_view field,
                              const std::optional<detail::FetchedSpan>& fetched) const {
  const auto member_name = [&]() {
    return str(shards_[it.shard].path) + "#" + std::string(keys_.substr(it.key_offset, it.key_size)) + "." +
           std::string(field);
  };
  if (fetched) {
    if (member.offset < fetched->offset || member.offset - fetched->offset > fetched->bytes->size() ||
        member.size > fetched->bytes->size() - (member.offset - fetched->offset)) {
      throw std::runtime_error(member_name() + ": its bytes lie outside the shard (corrupt index)");
    }
    const auto at = static_cast<std::size_t>(member.offset - fetched->offset);
    return Bytes(fetched->bytes, std::span<const std::byte>(*fetched->bytes).subspan(at, member.size));
  }
  if (const std::shared_ptr<const remote::RemoteUrl>& url = urls_[it.shard]) {
    const std::uint64_t bytes = shards_[it.shard].bytes;
    if (member.offset > bytes || member.size > bytes - member.offset) {
      throw std::runtime_error(member_name() + ": its bytes lie outside the shard (corrupt index)");
    }
    std::vector<std::byte> data(static_cast<std::size_t>(member.size));
    try {
      remote_->read(*url, member.offset, data);
    } catch (const std::runtime_error& error) {
      throw std::runtime_error(member_name() + ": " + error.what());
    }
    return Bytes(std::move(data));
  }
  const detail::MappedFile& map = *maps_[it.shard];
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

namespace {

// Tells the stream that a read of a remote shard is over, however it ends.
class ReadDone {
 public:
  ReadDone(const detail::RemoteShards* remote, std::size_t shard) : remote_(remote), shard_(shard) {}
  ~ReadDone() {
    if (remote_) remote_->done(shard_);
  }
  ReadDone(const ReadDone&) = delete;
  ReadDone& operator=(const ReadDone&) = delete;

 private:
  const detail::RemoteShards* remote_;
  std::size_t shard_;
};

}  // namespace

Sample TarShards::read(std::size_t i) const {
  const Item& it = item(i);
  const ReadDone done(urls_[it.shard] ? remote_.get() : nullptr, it.shard);
  Sample sample;
  const std::optional<detail::FetchedSpan> fetched = fetch_together(it);
  sample.bytes = member_bytes(it, it.image, fields_[it.image_field], fetched);
  sample.encoding = Encoding::encoded;
  sample.label = it.label;
  sample.index = i;
  sample.name = name(i);
  if (it.mask_field != no_field) {
    sample.mask = member_bytes(it, it.mask, fields_[it.mask_field], fetched);
    sample.mask_name = sample.name + "." + fields_[it.mask_field];
  }
  if (it.has_json) {
    const Bytes json = member_bytes(it, it.json, "json", fetched);
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
