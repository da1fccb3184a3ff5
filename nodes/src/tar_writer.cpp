#include "stoke/nodes/tar_writer.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "archive_support.hpp"
#include "dataset_support.hpp"
#include "file_format.hpp"
#include "image_files.hpp"
#include "stoke/nodes/decode.hpp"
#include "stoke/nodes/image_folder.hpp"
#include "stoke/nodes/tar_shards.hpp"

namespace stoke::nodes {

namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t block = 512;
constexpr std::uint64_t end_of_archive = 2 * block;  // two zero blocks
constexpr int max_width = 20;                        // digits of the largest std::size_t

using detail::archive_error;
using detail::max_text_label;  // what TarShards reads from a .cls member
using detail::str;

/// A member's size in the shard: its 512-byte ustar header and its data padded to 512 bytes.
std::uint64_t member_size(std::uint64_t data) { return block + (data + block - 1) / block * block; }

/// The lower-case extension of `name` without the dot when it is an image extension, else "".
std::string image_extension(const std::string& name) {
  const std::string extension = detail::lower_ascii(fs::path(name).extension().string());
  if (extension.size() < 2) return "";
  const std::vector<std::string>& known = default_image_extensions();
  return std::find(known.begin(), known.end(), extension.substr(1)) != known.end() ? extension.substr(1) : "";
}

/// The extension that the format of `bytes` goes by; "" when it is not an image format.
std::string format_extension(std::span<const std::byte> bytes) {
  switch (detect_format(bytes)) {
    case ImageFormat::jpeg:
      return "jpg";
    case ImageFormat::png:
      return "png";
    case ImageFormat::bmp:
      return "bmp";
    case ImageFormat::gif:
      return "gif";
    case ImageFormat::webp:
      return "webp";
    case ImageFormat::tiff:
      return "tif";
    case ImageFormat::pnm:
      return "ppm";
    case ImageFormat::dicom:
      return "dcm";
    case ImageFormat::unknown:
      break;
  }
  return "";
}

Bytes text_bytes(std::string_view text) {
  const auto bytes = std::as_bytes(std::span(text.data(), text.size()));
  return Bytes(std::vector<std::byte>(bytes.begin(), bytes.end()));
}

/// `value` as JSON that reads back as the same float: an integer when it is integral, else the
/// double nearest to its shortest decimal form when that reads back the same ("0.1", not
/// "0.10000000149011612"), else the double equal to it.
nlohmann::json json_number(float value) {
  if (value == std::trunc(value) && std::fabs(value) < 9.0e15F) return static_cast<std::int64_t>(value);
  char text[32];
  const auto printed = std::to_chars(text, text + sizeof text, value);
  double shortest = 0;
  const auto parsed = std::from_chars(text, printed.ptr, shortest);
  if (printed.ec == std::errc{} && parsed.ec == std::errc{} && static_cast<float>(shortest) == value) return shortest;
  return static_cast<double>(value);
}

std::string json_targets(const Sample& sample) {
  nlohmann::json object = nlohmann::json::object();
  for (const auto& [name, target] : sample.targets) {
    // Captures the binding through a reference: clang before 16 cannot capture structured bindings.
    const std::string& key = name;
    const auto bad = [&](const std::string& why) {
      return std::invalid_argument(sample.name + ": target '" + key + "' " + why);
    };
    if (target.shape.size() > 1) {
      throw bad("has " + std::to_string(target.shape.size()) +
                " dimensions; a tar shard's .json holds scalars and vectors only");
    }
    if (static_cast<std::int64_t>(target.values.size()) != target.elements()) {
      throw bad("has " + std::to_string(target.values.size()) + " values for its shape");
    }
    for (const float value : target.values) {
      if (!std::isfinite(value)) throw bad("has a value that is not finite, which JSON cannot hold");
    }
    if (target.shape.empty()) {
      object[name] = json_number(target.values.front());
    } else {
      nlohmann::json values = nlohmann::json::array();
      for (const float value : target.values) values.push_back(json_number(value));
      object[name] = std::move(values);
    }
  }
  return object.dump();
}

}  // namespace

// ---- TarShardPattern ------------------------------------------------------------------------

TarShardPattern::TarShardPattern(std::string pattern) : pattern_(std::move(pattern)) {
  const auto bad = [this](const std::string& why) {
    return std::invalid_argument("shard name pattern '" + pattern_ + "': " + why);
  };
  std::string* text = &before_;
  for (std::size_t i = 0; i < pattern_.size(); ++i) {
    if (pattern_[i] != '%') {
      *text += pattern_[i];
      continue;
    }
    if (i + 1 < pattern_.size() && pattern_[i + 1] == '%') {
      *text += '%';
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    while (end < pattern_.size() && pattern_[end] >= '0' && pattern_[end] <= '9') ++end;
    const std::string digits = pattern_.substr(i + 1, end - i - 1);
    if (end == pattern_.size() || pattern_[end] != 'd') {
      throw bad("a '%' must start a zero-padded number such as %06d (or be doubled, %%, for a '%')");
    }
    if (digits.empty() || digits[0] != '0' || digits.size() < 2) {
      throw bad(
          "the shard number must be zero-padded (e.g. %06d), so that shard names sort in the order "
          "they were written, which is the order TarShards reads them in");
    }
    if (numbered_) throw bad("it has two shard numbers; give one (e.g. train-%06d.tar)");
    width_ = digits.size() <= 3 ? std::stoi(digits) : 0;
    if (width_ < 1 || width_ > max_width) throw bad("the number's width must be 1..20 (e.g. %06d)");
    numbered_ = true;
    text = &after_;
    i = end;
  }
  const std::string& last = numbered_ ? after_ : before_;
  const std::string name = fs::path(numbered_ ? before_ + "0" + after_ : before_).filename().string();
  if (!last.ends_with(".tar") || name == ".tar") {
    throw bad("shard names must end in .tar (TarShards reads a folder's *.tar files), e.g. shards/train-%06d.tar");
  }
}

fs::path TarShardPattern::path(std::size_t n) const {
  if (!numbered_) {
    if (n > 0)
      throw std::invalid_argument("shard name '" + pattern_ + "' names one shard; shard " + std::to_string(n) +
                                  " needs a number in it (e.g. train-%06d.tar)");
    return before_;
  }
  std::string number = std::to_string(n);
  if (number.size() > static_cast<std::size_t>(width_)) {
    throw std::invalid_argument("shard name pattern '" + pattern_ + "': shard " + number + " needs more than " +
                                std::to_string(width_) + " digits (names would no longer sort in order)");
  }
  number.insert(0, static_cast<std::size_t>(width_) - number.size(), '0');
  return before_ + number + after_;
}

// ---- samples as members ---------------------------------------------------------------------

std::string tar_key(std::size_t position, std::size_t count) {
  const std::size_t width = std::max<std::size_t>(6, std::to_string(count > 0 ? count - 1 : 0).size());
  std::string key = std::to_string(position);
  if (key.size() < width) key.insert(0, width - key.size(), '0');
  return key;
}

std::string tar_image_field(const Sample& sample) {
  if (std::string extension = image_extension(sample.name); !extension.empty()) return extension;
  if (std::string extension = format_extension(sample.bytes.span()); !extension.empty()) return extension;
  throw std::invalid_argument(sample.name +
                              ": neither its name's extension nor its bytes show an image format (JPEG, PNG, BMP, "
                              "GIF, WebP, TIFF, PNM, DICOM), which a tar shard's image member is named by");
}

std::vector<TarMember> tar_members(const Sample& sample, std::string image_field) {
  if (sample.encoding != Encoding::encoded) {
    throw std::invalid_argument(sample.name +
                                ": raw pixels (e.g. CIFAR records), not an encoded image file; encode them first "
                                "(`stoke pack --resize` re-encodes as JPEG)");
  }
  if (!sample.boxes.empty()) {
    throw std::invalid_argument(sample.name +
                                ": carries detection boxes, which tar shards as TarShards reads them "
                                "do not hold; read the dataset where it is");
  }
  if (sample.label > max_text_label) {
    throw std::invalid_argument(sample.name + ": label " + std::to_string(sample.label) +
                                " is above 999999, the largest a .cls member holds for TarShards");
  }
  std::vector<TarMember> members;
  members.push_back({image_field.empty() ? tar_image_field(sample) : std::move(image_field), sample.bytes});
  if (sample.label >= 0) members.push_back({"cls", text_bytes(std::to_string(sample.label) + "\n")});
  if (!sample.mask.empty()) {
    std::string extension = image_extension(sample.mask_name);
    if (extension.empty()) extension = format_extension(sample.mask.span());
    members.push_back({"mask." + (extension.empty() ? std::string("bin") : extension), sample.mask});
  }
  if (!sample.targets.empty()) members.push_back({"json", text_bytes(json_targets(sample))});
  return members;
}

// ---- one shard being written ----------------------------------------------------------------

class TarWriter::Shard {
 public:
  Shard(fs::path destination, std::int64_t mtime, std::size_t first)
      : destination_(std::move(destination)), mtime_(mtime), first_(first) {
    fd_ = detail::create_temp_beside(destination_, temp_);
    if (fd_ < 0) fail("cannot create", std::strerror(errno));
    try {
      archive_.reset(archive_write_new());
      if (!archive_) throw std::bad_alloc();
      archive* a = archive_.get();
      if (archive_write_set_format_ustar(a) != ARCHIVE_OK ||
          archive_write_set_bytes_per_block(a, static_cast<int>(1U << 20)) != ARCHIVE_OK ||
          archive_write_set_bytes_in_last_block(a, 1) != ARCHIVE_OK || archive_write_open_fd(a, fd_) != ARCHIVE_OK) {
        fail("cannot start a tar archive", archive_error(a));
      }
    } catch (...) {
      archive_.reset();  // the destructor does not run for an object whose constructor throws
      ::close(fd_);
      ::unlink(temp_.c_str());
      throw;
    }
  }

  ~Shard() {
    archive_.reset();  // may write the end of the archive into the temporary file, removed below
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_.c_str());
  }
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  void add(const std::string& name, std::span<const std::byte> data) {
    archive* a = archive_.get();
    const std::unique_ptr<archive_entry, void (*)(archive_entry*)> entry(archive_entry_new(), archive_entry_free);
    if (!entry) throw std::bad_alloc();
    archive_entry_set_pathname(entry.get(), name.c_str());
    archive_entry_set_size(entry.get(), static_cast<la_int64_t>(data.size()));
    archive_entry_set_filetype(entry.get(), AE_IFREG);
    archive_entry_set_perm(entry.get(), 0644);
    archive_entry_set_mtime(entry.get(), static_cast<time_t>(mtime_), 0);
    if (archive_write_header(a, entry.get()) != ARCHIVE_OK)
      fail("cannot write the header of " + name, archive_error(a));
    if (!data.empty()) {
      const la_ssize_t wrote = archive_write_data(a, data.data(), data.size());
      if (wrote != static_cast<la_ssize_t>(data.size())) fail("cannot write " + name, archive_error(a));
    }
    bytes_ += member_size(data.size());
  }

  /// Ends the archive, syncs, closes and renames the file to its destination.
  TarShardSummary commit() {
    archive* a = archive_.get();
    if (archive_write_close(a) != ARCHIVE_OK) fail("cannot finish", archive_error(a));
    archive_.reset();
    if (::fsync(fd_) != 0) fail("cannot sync", std::strerror(errno));
    if (::close(std::exchange(fd_, -1)) != 0) fail("cannot close", std::strerror(errno));
    if (::rename(temp_.c_str(), destination_.c_str()) != 0) {
      const int error = errno;
      throw std::runtime_error(str(temp_) + ": cannot rename to " + str(destination_) + ": " + std::strerror(error));
    }
    committed_ = true;
    return {destination_, {}, first_, samples, bytes_ + end_of_archive};
  }

  /// The members written so far, without the end of the archive.
  std::uint64_t bytes() const noexcept { return bytes_; }
  std::size_t samples = 0;

 private:
  [[noreturn]] void fail(const std::string& what, const std::string& why) const {
    throw std::runtime_error(str(temp_) + ": " + what + " (writing " + str(destination_) + "): " + why);
  }

  fs::path destination_;
  fs::path temp_;
  std::int64_t mtime_;
  std::size_t first_;
  detail::ArchiveWriter archive_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
  bool committed_ = false;
};

// ---- TarWriter ------------------------------------------------------------------------------

TarWriter::TarWriter(TarShardPattern pattern, TarWriterOptions options)
    : pattern_(std::move(pattern)), options_(options) {
  if ((options_.shard_bytes > 0 || options_.shard_samples > 0) && !pattern_.numbered()) {
    throw std::invalid_argument("shard name '" + pattern_.pattern() +
                                "' names one shard, but a shard size limit is set: put a number in the name "
                                "(e.g. train-%06d.tar)");
  }
}

TarWriter::~TarWriter() {
  shard_.reset();
  if (done_) return;
  // Not finished: leave no partial set of shards behind.
  for (const TarShardSummary& shard : finished_) {
    ::unlink(shard.path.c_str());
    if (!shard.index.empty()) ::unlink(shard.index.c_str());
  }
}

std::uint64_t TarWriter::bytes() const noexcept {
  std::uint64_t total = shard_ ? shard_->bytes() : 0;
  for (const TarShardSummary& shard : finished_) total += shard.bytes;
  return total;
}

void TarWriter::add(std::string_view key, std::span<const TarMember> members) {
  if (done_) throw std::logic_error("TarWriter::add after finish()");
  const std::size_t slash = key.rfind('/');
  const std::string_view base = slash == std::string_view::npos ? key : key.substr(slash + 1);
  if (base.empty() || base.front() == '.' || base.find('.') != std::string_view::npos) {
    throw std::invalid_argument("TarWriter: bad sample key '" + std::string(key) +
                                "': its last part must be non-empty, without '.' (TarShards reads a key up to "
                                "the first '.' of a member's name)");
  }
  std::uint64_t size = 0;
  for (const TarMember& member : members) {
    if (member.field.empty() || member.field.find('/') != std::string::npos) {
      throw std::invalid_argument("TarWriter: sample '" + std::string(key) + "': bad field '" + member.field +
                                  "' (non-empty, without '/')");
    }
    size += member_size(member.bytes.size());
  }
  if (shard_ && ((options_.shard_samples > 0 && shard_->samples >= options_.shard_samples) ||
                 (options_.shard_bytes > 0 && shard_->bytes() + size + end_of_archive > options_.shard_bytes))) {
    finish_shard();
  }
  if (!shard_) shard_ = std::make_unique<Shard>(pattern_.path(finished_.size()), options_.mtime, samples_);
  for (const TarMember& member : members) {
    shard_->add(std::string(key) + "." + member.field, member.bytes.span());
  }
  ++shard_->samples;
  ++samples_;
}

void TarWriter::finish_shard() {
  TarShardSummary summary = shard_->commit();
  shard_.reset();
  if (options_.write_index) {
    TarShardsOptions read;
    read.access = PackAccess::sequential;
    try {
      const TarShards shards(summary.path, read);
      summary.index = shards.shards().front().index;
    } catch (const std::runtime_error&) {
      // TarShards finds no sample in it (members without an image field): nothing to index.
    }
  }
  finished_.push_back(std::move(summary));
}

std::vector<TarShardSummary> TarWriter::finish() {
  if (done_) throw std::logic_error("TarWriter::finish called twice");
  if (shard_) finish_shard();
  done_ = true;
  return finished_;
}

}  // namespace stoke::nodes
