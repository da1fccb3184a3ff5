#include "stoke/nodes/packed.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <utility>

#include "dataset_support.hpp"
#include "file_format.hpp"
#include "mapped_file.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

namespace {

constexpr std::array<char, 8> data_magic{'S', 'T', 'O', 'K', 'E', 'D', 'A', 'T'};
constexpr std::array<char, 8> index_magic{'S', 'T', 'O', 'K', 'E', 'I', 'D', 'X'};
constexpr std::size_t data_header_size = 32;
constexpr std::size_t index_header_size = 64;
constexpr std::size_t item_record_size = 32;
constexpr std::size_t class_record_size = 16;
constexpr std::size_t checksum_at = 56;

using detail::append_u32;
using detail::append_u64;
using detail::get_u32;
using detail::get_u64;
using detail::put_u32;
using detail::put_u64;

/// FNV-1a 64 of `bytes`, with [skip, skip + 8) taken as zero (where the checksum itself lives).
std::uint64_t checksum(std::span<const std::byte> bytes, std::size_t skip) { return detail::fnv1a(bytes, skip); }

bool magic_is(const std::byte* at, const std::array<char, 8>& magic) {
  return std::memcmp(at, magic.data(), magic.size()) == 0;
}

using detail::str;

}  // namespace

fs::path pack_index_path(const fs::path& data) {
  fs::path index = data;
  index += ".idx";
  return index;
}

// ---- PackedDataset ---------------------------------------------------------------------------

PackedDataset::PackedDataset(fs::path path, PackedOptions options) : path_(std::move(path)), options_(options) {
  if (path_.extension() == ".idx") path_.replace_extension();
  index_path_ = pack_index_path(path_);
  const std::string index_name = str(index_path_);
  const std::string data_name = str(path_);
  const auto corrupt = [&](const std::string& what) { return std::runtime_error(index_name + ": " + what); };

  index_ = std::make_shared<const detail::MappedFile>(index_path_);
  const std::span<const std::byte> index = index_->bytes();
  if (index.size() < index_header_size) {
    throw corrupt(std::to_string(index.size()) + " bytes, too short for a stoke pack index (truncated copy?)");
  }
  const std::byte* header = index.data();
  if (!magic_is(header, index_magic)) throw corrupt("not a stoke pack index (its first bytes are not STOKEIDX)");
  const std::uint32_t version = get_u32(header + 8);
  if (version != pack_format_version) {
    throw corrupt("pack format version " + std::to_string(version) + ", this stoke reads version " +
                  std::to_string(pack_format_version) + ": pack the dataset again with this stoke");
  }
  if (get_u32(header + 12) != index_header_size) throw corrupt("bad header size (corrupt index)");
  const std::uint64_t pack_id = get_u64(header + 16);
  const std::uint64_t count = get_u64(header + 24);
  const std::uint64_t expected_data_size = get_u64(header + 32);
  resize_ = get_u32(header + 40);
  const std::uint64_t class_count = get_u32(header + 44);
  const std::uint64_t strings_size = get_u64(header + 48);
  // Bounded by the file's size first, so that the sum below cannot overflow.
  if (count > index.size() / item_record_size || strings_size > index.size()) {
    throw corrupt("its header describes more items or names than the file holds (truncated copy?)");
  }
  const std::uint64_t expected_index_size =
      index_header_size + item_record_size * count + class_record_size * class_count + strings_size;
  if (expected_index_size != index.size()) {
    throw corrupt(std::to_string(index.size()) + " bytes, but its header describes " +
                  std::to_string(expected_index_size) +
                  (expected_index_size > index.size() ? " (truncated copy?)" : " (corrupt index)"));
  }
  count_ = static_cast<std::size_t>(count);
  strings_at_ =
      static_cast<std::size_t>(index_header_size + item_record_size * count + class_record_size * class_count);

  data_ = std::make_shared<const detail::MappedFile>(path_, /*keep_open=*/true);  // read_at() in read()
  const std::span<const std::byte> data = data_->bytes();
  if (data.size() < data_header_size || !magic_is(data.data(), data_magic)) {
    throw std::runtime_error(data_name + ": not a stoke pack data file (its first bytes are not STOKEDAT)");
  }
  if (get_u64(data.data() + 16) != pack_id) {
    throw corrupt("belongs to another pack than " + data_name +
                  " (pack ids differ): copy both files of one pack, or pack the dataset again");
  }

  for (std::size_t i = 0; i < count_; ++i) {
    const Record r = record(i);
    if (r.offset < data_header_size || r.size > data.size() || r.offset > data.size() - r.size) {
      throw corrupt("item " + std::to_string(i) + " points past the end of " + data_name + " (truncated copy?)");
    }
    if (r.name_offset > strings_size || r.name_size > strings_size - r.name_offset) {
      throw corrupt("item " + std::to_string(i) + "'s name lies outside the string table (corrupt index)");
    }
    if (r.label < -1 || (class_count > 0 && r.label >= static_cast<std::int64_t>(class_count))) {
      throw corrupt("item " + std::to_string(i) + " has label " + std::to_string(r.label) + " but the pack has " +
                    std::to_string(class_count) + " classes (corrupt index)");
    }
  }
  classes_.reserve(class_count);
  for (std::size_t c = 0; c < class_count; ++c) {
    const std::byte* at = index.data() + index_header_size + item_record_size * count_ + class_record_size * c;
    const std::uint64_t offset = get_u64(at);
    const std::uint32_t size = get_u32(at + 8);
    if (offset > strings_size || size > strings_size - offset) {
      throw corrupt("class " + std::to_string(c) + "'s name lies outside the string table (corrupt index)");
    }
    classes_.emplace_back(reinterpret_cast<const char*>(index.data() + strings_at_ + offset), size);
  }
  if (data.size() != expected_data_size) {
    throw std::runtime_error(data_name + ": " + std::to_string(data.size()) + " bytes, but " + index_name +
                             " describes " + std::to_string(expected_data_size) +
                             (data.size() < expected_data_size ? " (truncated copy?)" : " (mixed-up files?)"));
  }
  if (checksum(index, checksum_at) != get_u64(header + checksum_at)) {
    throw corrupt("checksum mismatch: the index is corrupt (copy it again, or pack the dataset again)");
  }

  if (options_.access == PackAccess::sequential) {
    data_->advise_sequential();
  } else {
    data_->advise_random();
  }
}

PackedDataset::~PackedDataset() = default;

std::uint64_t PackedDataset::data_size() const noexcept { return data_->size(); }

PackedDataset::Record PackedDataset::record(std::size_t i) const {
  const std::byte* at = index_->bytes().data() + index_header_size + item_record_size * i;
  return {get_u64(at), get_u64(at + 8), get_u64(at + 16), get_u32(at + 24),
          static_cast<std::int32_t>(get_u32(at + 28))};
}

void PackedDataset::check(std::size_t i) const {
  if (i >= count_) detail::item_out_of_range("PackedDataset '" + str(path_) + "'", i, count_);
}

int PackedDataset::label(std::size_t i) const {
  check(i);
  return record(i).label;
}

std::string PackedDataset::name(std::size_t i) const {
  check(i);
  const Record r = record(i);
  if (r.name_size == 0) return str(path_) + "#" + std::to_string(i);
  return {reinterpret_cast<const char*>(index_->bytes().data() + strings_at_ + r.name_offset), r.name_size};
}

Sample PackedDataset::read(std::size_t i) const {
  check(i);
  const Record r = record(i);
  Sample sample;
  // A copy, not a view of the mapping: a pack truncated in place during the epoch is then an
  // error naming the item, not a SIGBUS in the decoder (MappedFile).
  sample.bytes = Bytes(data_->read_at(r.offset, r.size, str(path_) + " item " + std::to_string(i)));
  sample.encoding = Encoding::encoded;
  sample.label = r.label;
  sample.index = i;
  sample.name = name(i);
  return sample;
}

// ---- PackWriter ------------------------------------------------------------------------------

/// A file being written under a temporary name beside its destination; removed on destruction
/// unless renamed to the destination.
class PackWriter::File {
 public:
  explicit File(fs::path destination) : destination_(std::move(destination)) {
    fd_ = detail::create_temp_beside(destination_, temp_);
    if (fd_ < 0) fail("cannot create");
    buffer_.reserve(buffer_size);
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
    if (!kept_) ::unlink(temp_.c_str());
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  void write(std::span<const std::byte> bytes) {
    written_ += bytes.size();
    if (buffer_.size() + bytes.size() > buffer_size) flush();
    if (bytes.size() >= buffer_size) {
      write_all(bytes);
    } else {
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    }
  }

  /// Flushes, syncs to disk and closes.
  void sync_and_close() {
    flush();
    if (::fsync(fd_) != 0) fail("cannot sync");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail("cannot close");
  }

  /// Renames the (closed) temporary file to the destination.
  void commit() {
    if (::rename(temp_.c_str(), destination_.c_str()) != 0) {
      const int error = errno;
      throw std::runtime_error(str(temp_) + ": cannot rename to " + str(destination_) + ": " + std::strerror(error));
    }
    kept_ = true;
  }

  std::uint64_t written() const noexcept { return written_; }
  const fs::path& temp() const noexcept { return temp_; }

 private:
  static constexpr std::size_t buffer_size = std::size_t{1} << 20;

  [[noreturn]] void fail(const char* what) const {
    const int error = errno;
    throw std::runtime_error(str(temp_) + ": " + what + " (writing " + str(destination_) +
                             "): " + std::strerror(error));
  }

  void flush() {
    write_all(buffer_);
    buffer_.clear();
  }

  void write_all(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("cannot write");
      }
      bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
  }

  fs::path destination_;
  fs::path temp_;
  int fd_ = -1;
  bool kept_ = false;
  std::uint64_t written_ = 0;
  std::vector<std::byte> buffer_;
};

PackWriter::PackWriter(fs::path path, std::vector<std::string> classes, std::uint32_t resize)
    : path_(std::move(path)), classes_(std::move(classes)), resize_(resize) {
  if (path_.empty()) throw std::invalid_argument("PackWriter: empty output path");
  if (classes_.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw std::invalid_argument("PackWriter: too many classes");
  }
  std::random_device device;
  pack_id_ = (std::uint64_t{device()} << 32) ^ device() ^
             static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  data_ = std::make_unique<File>(path_);

  std::vector<std::byte> header;
  header.insert(header.end(), reinterpret_cast<const std::byte*>(data_magic.data()),
                reinterpret_cast<const std::byte*>(data_magic.data()) + data_magic.size());
  append_u32(header, pack_format_version);
  append_u32(header, data_header_size);
  append_u64(header, pack_id_);
  append_u64(header, 0);
  data_->write(header);
}

PackWriter::~PackWriter() = default;  // an unfinished pack's File removes its temporary file

std::uint64_t PackWriter::data_bytes() const noexcept { return data_ ? data_->written() : 0; }

void PackWriter::add(std::span<const std::byte> bytes, int label, std::string_view name) {
  if (finished_) throw std::logic_error("PackWriter::add after finish() (" + str(path_) + ")");
  if (label < -1 || (label >= 0 && !classes_.empty() && static_cast<std::size_t>(label) >= classes_.size())) {
    throw std::invalid_argument("PackWriter: item '" + std::string(name) + "' has label " + std::to_string(label) +
                                " but the pack has " + std::to_string(classes_.size()) + " classes");
  }
  if (name.size() > std::numeric_limits<std::uint32_t>::max()) {
    throw std::invalid_argument("PackWriter: item name too long");
  }
  const std::uint64_t offset = data_->written();
  data_->write(bytes);
  append_u64(records_, offset);
  append_u64(records_, bytes.size());
  append_u64(records_, strings_.size());
  append_u32(records_, static_cast<std::uint32_t>(name.size()));
  append_u32(records_, static_cast<std::uint32_t>(label));
  strings_ += name;
  ++items_;
}

PackSummary PackWriter::finish() {
  if (finished_) throw std::logic_error("PackWriter::finish called twice (" + str(path_) + ")");
  const std::uint64_t data_size = data_->written();

  std::vector<std::byte> classes;
  std::string strings = strings_;
  for (const std::string& name : classes_) {
    append_u64(classes, strings.size());
    append_u32(classes, static_cast<std::uint32_t>(name.size()));
    append_u32(classes, 0);
    strings += name;
  }

  std::vector<std::byte> index;
  index.reserve(index_header_size + records_.size() + classes.size() + strings.size());
  index.insert(index.end(), reinterpret_cast<const std::byte*>(index_magic.data()),
               reinterpret_cast<const std::byte*>(index_magic.data()) + index_magic.size());
  append_u32(index, pack_format_version);
  append_u32(index, index_header_size);
  append_u64(index, pack_id_);
  append_u64(index, items_);
  append_u64(index, data_size);
  append_u32(index, resize_);
  append_u32(index, static_cast<std::uint32_t>(classes_.size()));
  append_u64(index, strings.size());
  append_u64(index, 0);  // checksum, filled in below
  index.insert(index.end(), records_.begin(), records_.end());
  index.insert(index.end(), classes.begin(), classes.end());
  const auto* text = reinterpret_cast<const std::byte*>(strings.data());
  index.insert(index.end(), text, text + strings.size());
  put_u64(index.data() + checksum_at, checksum(index, checksum_at));

  File index_file(pack_index_path(path_));
  index_file.write(index);
  data_->sync_and_close();
  index_file.sync_and_close();
  // The index goes last: a valid index beside a data file means the pack is complete.
  data_->commit();
  index_file.commit();
  finished_ = true;
  const fs::path directory = path_.has_parent_path() ? path_.parent_path() : fs::path(".");
  if (const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); fd >= 0) {
    ::fsync(fd);  // makes the renames durable; best effort
    ::close(fd);
  }
  return {path_, pack_index_path(path_), items_, data_size, index.size()};
}

}  // namespace stoke::nodes
