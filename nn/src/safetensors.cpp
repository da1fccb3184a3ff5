#include "stoke/nn/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include "safetensors_header.hpp"

namespace stoke::nn {
namespace {

// A header larger than this is taken for corruption rather than allocated: a checkpoint of
// thousands of tensors needs well under a megabyte of JSON.
constexpr std::uint64_t max_header_bytes = 100u << 20;

using safetensors::Entry;
using safetensors::Header;
using safetensors::is_utf8;
using safetensors::metadata_key;

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

[[noreturn]] void fail_in(std::string_view source, const std::string& what) {
  throw std::runtime_error(std::string(source) + ": " + what);
}

// ---- dtypes and sizes

std::string shape_text(std::span<const std::uint64_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// product(shape) * element size, or nullopt when that does not fit in 64 bits.
std::optional<std::uint64_t> byte_count(std::span<const std::uint64_t> shape, DType dtype) {
  std::uint64_t bytes = element_size(dtype);
  for (const std::uint64_t dim : shape) {
    if (dim != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / dim) {
      // Overflow unless a later dimension is zero, which makes the whole tensor empty.
      if (std::find(shape.begin(), shape.end(), 0u) != shape.end()) return 0;
      return std::nullopt;
    }
    bytes *= dim;
  }
  return bytes;
}

// Checks each entry's size against its dtype and shape, and that together they tile the
// `data_bytes` after the header exactly. Returns the entries in the order of their bytes (header
// order among empty tensors at the same offset).
std::vector<Entry> check_layout(std::vector<Entry> entries, std::uint64_t data_bytes, std::string_view source) {
  const auto offsets = [](const Entry& e) {
    return "[" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  };
  for (const Entry& e : entries) {
    const std::string tensor = "tensor " + in_quotes(e.name);
    if (e.begin > e.end) fail_in(source, tensor + ": data_offsets " + offsets(e) + " end before they begin");
    if (e.end > data_bytes)
      fail_in(source, tensor + ": data_offsets " + offsets(e) + " run past the end of the data (" +
                          std::to_string(data_bytes) + " bytes)");
    const std::optional<std::uint64_t> needed = byte_count(e.shape, e.dtype);
    if (!needed) fail_in(source, tensor + ": shape " + shape_text(e.shape) + " has too many elements");
    if (e.end - e.begin != *needed)
      fail_in(source, tensor + ": data_offsets " + offsets(e) + " hold " + std::to_string(e.end - e.begin) +
                          " bytes but " + std::string(safetensors_dtype_name(e.dtype)) + " " + shape_text(e.shape) +
                          " needs " + std::to_string(*needed));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  std::uint64_t pos = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < pos && previous != nullptr)  // pos > 0: a non-empty tensor came before
      fail_in(source, "tensor " + in_quotes(e.name) + ": data_offsets " + offsets(e) + " overlap tensor " +
                          in_quotes(previous->name) + "'s " + offsets(*previous));
    if (e.begin > pos)
      fail_in(source,
              "bytes [" + std::to_string(pos) + ", " + std::to_string(e.begin) + ") of the data belong to no tensor");
    pos = e.end;
    if (e.end > e.begin) previous = &e;
  }
  if (pos != data_bytes)
    fail_in(source,
            "bytes [" + std::to_string(pos) + ", " + std::to_string(data_bytes) + ") of the data belong to no tensor");
  return entries;
}

std::uint64_t read_u64_le(const std::byte* p) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<std::uint64_t>(p[i]);
  return value;
}

// The header length from the first 8 bytes, checked against the cap and against the file.
std::uint64_t checked_header_length(const std::byte* prefix, std::uint64_t total_bytes, std::string_view source) {
  const std::uint64_t length = read_u64_le(prefix);
  if (length > max_header_bytes)
    throw std::runtime_error(std::string(source) + ": header length " + std::to_string(length) + " exceeds the " +
                             std::to_string(max_header_bytes) + "-byte limit (not a safetensors file, or corrupt)");
  if (length > total_bytes - 8)
    throw std::runtime_error(std::string(source) + ": header length " + std::to_string(length) +
                             " runs past the end of the file (" + std::to_string(total_bytes) + " bytes)");
  return length;
}

[[noreturn]] void throw_too_short(std::uint64_t size, std::string_view source) {
  throw std::runtime_error(std::string(source) + ": " + std::to_string(size) +
                           " bytes is too short for a safetensors file (it starts with an 8-byte header length)");
}

// ---- writing

[[noreturn]] void throw_io(const std::string& what, const std::filesystem::path& path, int error) {
  throw std::runtime_error("write_safetensors: " + what + " '" + path.string() + "': " + std::strerror(error));
}

// Closes the descriptor and removes the temporary file unless released: every failure after the
// .tmp file exists leaves nothing behind.
class TempFile {
 public:
  explicit TempFile(std::filesystem::path path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_io("cannot create", path_, errno);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }

  void write_all(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const ::ssize_t written = ::write(fd_, bytes.data(), bytes.size());
      if (written < 0) {
        if (errno == EINTR) continue;
        throw_io("cannot write", path_, errno);
      }
      bytes = bytes.subspan(static_cast<std::size_t>(written));
    }
  }

  // fsync, close, rename over `target`.
  void commit(const std::filesystem::path& target) {
    if (::fsync(fd_) != 0) throw_io("cannot flush", path_, errno);
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw_io("cannot close", path_, errno);
    if (::rename(path_.c_str(), target.c_str()) != 0)
      throw_io("cannot rename '" + path_.string() + "' to", target, errno);
    committed_ = true;
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Makes the rename itself durable. Some file systems cannot fsync a folder (EINVAL); the file's
// bytes are on disk by then either way.
void sync_folder(const std::filesystem::path& target) {
  const std::filesystem::path folder = target.parent_path().empty() ? "." : target.parent_path();
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io("cannot open the folder of", target, errno);
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (result != 0 && error != EINVAL) throw_io("cannot flush the folder of", target, error);
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::u8:
      return "U8";
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i32:
      return "I32";
    case DType::u16:
      return "U16";
    case DType::i16:
      return "I16";
  }
  throw std::invalid_argument("safetensors: unknown DType " + std::to_string(static_cast<int>(dtype)));
}

std::vector<std::byte> encode_safetensors(const SafetensorsFile& file) {
  for (const auto& [key, value] : file.metadata) {
    if (!is_utf8(key) || !is_utf8(value))
      throw std::invalid_argument("write_safetensors: metadata " + in_quotes(key) + " is not valid UTF-8");
  }
  std::set<std::string_view> names;
  std::vector<Entry> entries;
  std::uint64_t offset = 0;
  for (const TensorRecord& t : file.tensors) {
    const std::string tensor = "write_safetensors: tensor " + in_quotes(t.name);
    if (t.name.empty()) throw std::invalid_argument("write_safetensors: a tensor has an empty name");
    if (t.name == metadata_key) throw std::invalid_argument(tensor + ": the name is reserved for the file's metadata");
    if (!is_utf8(t.name)) throw std::invalid_argument(tensor + ": the name is not valid UTF-8");
    if (!names.insert(t.name).second) throw std::invalid_argument(tensor + ": the name appears twice");
    std::vector<std::uint64_t> shape;
    for (const std::int64_t dim : t.shape) {
      if (dim < 0) throw std::invalid_argument(tensor + ": dimension " + std::to_string(dim) + " is negative");
      shape.push_back(static_cast<std::uint64_t>(dim));
    }
    const std::optional<std::uint64_t> needed = byte_count(shape, t.dtype);
    if (!needed || *needed != t.data.size())
      throw std::invalid_argument(tensor + ": data holds " + std::to_string(t.data.size()) + " bytes but " +
                                  std::string(to_string(t.dtype)) + " " + shape_text(shape) + " needs " +
                                  (needed ? std::to_string(*needed) : std::string("more than 2^64")));
    entries.push_back(
        {.name = t.name, .dtype = t.dtype, .shape = std::move(shape), .begin = offset, .end = offset + t.data.size()});
    offset += t.data.size();
  }
  std::string json = safetensors::format_header(entries, file.metadata);
  // Padding keeps the data 8-byte aligned in the file, so a reader may map it and view it in place.
  json.append((8 - json.size() % 8) % 8, ' ');

  std::vector<std::byte> bytes;
  bytes.reserve(8 + json.size() + offset);
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::byte>((json.size() >> (8 * i)) & 0xffu));
  for (const char ch : json) bytes.push_back(static_cast<std::byte>(ch));
  for (const TensorRecord& t : file.tensors) bytes.insert(bytes.end(), t.data.begin(), t.data.end());
  return bytes;
}

SafetensorsFile decode_safetensors(std::span<const std::byte> bytes, std::string_view source) {
  if (bytes.size() < 8) throw_too_short(bytes.size(), source);
  const std::uint64_t length = checked_header_length(bytes.data(), bytes.size(), source);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), length);
  Header header = safetensors::parse_header(text, source);
  const std::span<const std::byte> data = bytes.subspan(8 + length);
  std::vector<Entry> entries = check_layout(std::move(header.entries), data.size(), source);

  SafetensorsFile file;
  file.metadata = std::move(header.metadata);
  file.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    const auto from = data.begin() + static_cast<std::ptrdiff_t>(e.begin);
    const auto to = data.begin() + static_cast<std::ptrdiff_t>(e.end);
    file.tensors.push_back({.name = std::move(e.name),
                            .dtype = e.dtype,
                            .shape = std::vector<std::int64_t>(e.shape.begin(), e.shape.end()),
                            .data = std::vector<std::byte>(from, to)});
  }
  return file;
}

void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file) {
  const std::vector<std::byte> bytes = encode_safetensors(file);  // argument errors before any file exists
  std::filesystem::path temp = path;
  temp += ".tmp";
  TempFile out(temp);
  out.write_all(bytes);
  out.commit(path);
  sync_folder(path);
}

namespace {

// An open file whose header has been read and checked; `in` stands at the first tensor byte.
struct OpenedFile {
  std::ifstream in;
  std::string source;
  Header header;
  std::vector<Entry> entries;  // in the order of their bytes

  void read(std::byte* into, std::uint64_t count) {
    in.read(reinterpret_cast<char*>(into), static_cast<std::streamsize>(count));
    if (static_cast<std::uint64_t>(in.gcount()) != count)
      throw std::runtime_error(source + ": the file ended early (it changed while being read?)");
  }
};

OpenedFile open_and_read_header(const std::filesystem::path& path) {
  OpenedFile file{std::ifstream(path, std::ios::binary), path.string(), {}, {}};
  if (!file.in) throw std::runtime_error(file.source + ": cannot open: " + std::strerror(errno));
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) throw std::runtime_error(file.source + ": cannot read its size: " + error.message());
  if (size < 8) throw_too_short(size, file.source);

  std::byte prefix[8];
  file.read(prefix, 8);
  const std::uint64_t length = checked_header_length(prefix, size, file.source);
  std::string text(length, '\0');
  file.read(reinterpret_cast<std::byte*>(text.data()), length);
  file.header = safetensors::parse_header(text, file.source);
  file.entries = check_layout(std::move(file.header.entries), size - 8 - length, file.source);
  return file;
}

}  // namespace

SafetensorsFile read_safetensors(const std::filesystem::path& path) {
  OpenedFile opened = open_and_read_header(path);
  // The entries tile the data in order, so reading them one after another reads it all.
  SafetensorsFile file;
  file.metadata = std::move(opened.header.metadata);
  file.tensors.reserve(opened.entries.size());
  for (Entry& e : opened.entries) {
    TensorRecord record{.name = std::move(e.name),
                        .dtype = e.dtype,
                        .shape = std::vector<std::int64_t>(e.shape.begin(), e.shape.end()),
                        .data = std::vector<std::byte>(e.end - e.begin)};
    opened.read(record.data.data(), record.data.size());
    file.tensors.push_back(std::move(record));
  }
  return file;
}

std::map<std::string, std::string> read_safetensors_metadata(const std::filesystem::path& path) {
  return std::move(open_and_read_header(path).header.metadata);
}

}  // namespace stoke::nn
