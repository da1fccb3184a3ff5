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

namespace stoke::nn {
namespace {

// A header larger than this is taken for corruption rather than allocated: a checkpoint of
// thousands of tensors needs well under a megabyte of JSON.
constexpr std::uint64_t max_header_bytes = 100u << 20;
constexpr std::string_view metadata_key = "__metadata__";

// ---- UTF-8 and JSON text

// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool is_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    std::size_t extra = 0;
    std::uint32_t code = 0;
    std::uint32_t min = 0;
    if (lead < 0x80) {
      ++i;
      continue;
    } else if ((lead & 0xe0) == 0xc0) {
      extra = 1, code = lead & 0x1fu, min = 0x80;
    } else if ((lead & 0xf0) == 0xe0) {
      extra = 2, code = lead & 0x0fu, min = 0x800;
    } else if ((lead & 0xf8) == 0xf0) {
      extra = 3, code = lead & 0x07u, min = 0x10000;
    } else {
      return false;
    }
    if (text.size() - i <= extra) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3fu);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return false;
    i += extra + 1;
  }
  return true;
}

void append_utf8(std::string& out, std::uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xc0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xe0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
}

void append_json_string(std::string& out, std::string_view text) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : text) {
    const auto byte = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (byte < 0x20) {
      out += "\\u00";
      out += hex[byte >> 4];
      out += hex[byte & 0xf];
    } else {
      out += ch;  // UTF-8 as it is: JSON text is UTF-8
    }
  }
  out += '"';
}

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

[[noreturn]] void fail_in(std::string_view source, const std::string& what) {
  throw std::runtime_error(std::string(source) + ": " + what);
}

// ---- dtypes and sizes

std::optional<DType> dtype_from_name(std::string_view name) {
  if (name == "F32") return DType::f32;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  if (name == "U8") return DType::u8;
  if (name == "I32") return DType::i32;
  return std::nullopt;
}

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

// ---- the header parser: strict JSON, only the subset the format uses

// A tensor's entry as the header gives it, before its bytes are read.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

struct Header {
  std::vector<Entry> entries;  // in header order
  std::map<std::string, std::string> metadata;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  Header parse() {
    Header header;
    std::set<std::string> names;
    skip_space();
    expect('{', "at the start of the header");
    if (!consume('}')) {
      do {
        std::string key = parse_string("a tensor name");
        expect(':', "after " + in_quotes(key));
        if (!names.insert(key).second) fail("the name " + in_quotes(key) + " appears twice");
        if (key == metadata_key) {
          header.metadata = parse_metadata();
        } else {
          header.entries.push_back(parse_entry(std::move(key)));
        }
      } while (consume(','));
      expect('}', "after a tensor's entry (or a missing ',')");
    }
    skip_space();
    if (pos_ != text_.size()) fail_at("unexpected text after the header's closing '}'");
    return header;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { fail_in(source_, what); }
  [[noreturn]] void fail_at(const std::string& what) const {
    fail("header JSON at byte " + std::to_string(pos_) + ": " + what);
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  // Skips white space, then takes `ch` if it is next.
  bool consume(char ch) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == ch) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char ch, const std::string& where) {
    if (!consume(ch)) {
      const std::string found = pos_ < text_.size() ? "'" + std::string(1, text_[pos_]) + "'" : "the end";
      fail_at("expected '" + std::string(1, ch) + "' " + where + ", found " + found);
    }
  }

  unsigned hex_digit() {
    if (pos_ >= text_.size()) fail_at("the header ends inside a \\u escape");
    const char ch = text_[pos_++];
    if (ch >= '0' && ch <= '9') return static_cast<unsigned>(ch - '0');
    if (ch >= 'a' && ch <= 'f') return static_cast<unsigned>(ch - 'a' + 10);
    if (ch >= 'A' && ch <= 'F') return static_cast<unsigned>(ch - 'A' + 10);
    --pos_;
    fail_at("a \\u escape needs four hex digits");
  }

  std::uint32_t hex4() {
    std::uint32_t code = 0;
    for (int i = 0; i < 4; ++i) code = (code << 4) | hex_digit();
    return code;
  }

  std::string parse_string(const std::string& what) {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != '"') fail_at("expected a string (" + what + ")");
    ++pos_;
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) fail_at("a string is not closed");
      const char ch = text_[pos_++];
      if (ch == '"') break;
      if (static_cast<unsigned char>(ch) < 0x20) fail_at("a control character inside a string");
      if (ch != '\\') {
        out += ch;
        continue;
      }
      if (pos_ >= text_.size()) fail_at("a string ends inside an escape");
      switch (const char esc = text_[pos_++]; esc) {
        case '"':
        case '\\':
        case '/':
          out += esc;
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          std::uint32_t code = hex4();
          if (code >= 0xdc00 && code <= 0xdfff) fail_at("a \\u escape holds a lone low surrogate");
          if (code >= 0xd800 && code <= 0xdbff) {
            // A high surrogate must be followed by an escaped low one; together they are one code point.
            if (text_.substr(pos_, 2) != "\\u") fail_at("a \\u escape holds a lone high surrogate");
            pos_ += 2;
            const std::uint32_t low = hex4();
            if (low < 0xdc00 || low > 0xdfff) fail_at("a high surrogate is not followed by a low one");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, code);
          break;
        }
        default:
          --pos_;
          fail_at("unknown escape '\\" + std::string(1, esc) + "' in a string");
      }
    }
    if (!is_utf8(out)) fail_at("a string is not valid UTF-8");
    return out;
  }

  std::uint64_t parse_count(const std::string& what) {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9')
      fail_at("expected a non-negative integer (" + what + ")");
    if (text_[pos_] == '0' && pos_ + 1 < text_.size() && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9')
      fail_at("a number with a leading zero (" + what + ")");
    std::uint64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const auto digit = static_cast<std::uint64_t>(text_[pos_] - '0');
      if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10)
        fail_at("a number too large (" + what + ")");
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
      fail_at("expected an integer, found a fraction or exponent (" + what + ")");
    return value;
  }

  std::vector<std::uint64_t> parse_counts(const std::string& what) {
    std::vector<std::uint64_t> values;
    expect('[', "to open " + what);
    if (consume(']')) return values;
    do {
      values.push_back(parse_count(what));
    } while (consume(','));
    expect(']', "to close " + what);
    return values;
  }

  std::map<std::string, std::string> parse_metadata() {
    std::map<std::string, std::string> metadata;
    expect('{', "to open __metadata__");
    if (consume('}')) return metadata;
    do {
      std::string key = parse_string("a __metadata__ key");
      expect(':', "after __metadata__ key " + in_quotes(key));
      std::string value = parse_string("__metadata__ " + in_quotes(key) + " must be a string");
      if (metadata.contains(key)) fail("__metadata__ has the key " + in_quotes(key) + " twice");
      metadata.emplace(std::move(key), std::move(value));
    } while (consume(','));
    expect('}', "to close __metadata__");
    return metadata;
  }

  Entry parse_entry(std::string name) {
    const std::string tensor = "tensor " + in_quotes(name);
    Entry entry;
    entry.name = std::move(name);
    bool has_dtype = false, has_shape = false, has_offsets = false;
    expect('{', "to open " + tensor);
    if (!consume('}')) {
      do {
        const std::string key = parse_string("a key of " + tensor);
        expect(':', "after " + tensor + "'s key " + in_quotes(key));
        bool* seen = nullptr;
        if (key == "dtype") {
          seen = &has_dtype;
          const std::string dtype = parse_string(tensor + "'s dtype");
          const std::optional<DType> parsed = dtype_from_name(dtype);
          if (!parsed)
            fail(tensor + ": dtype " + in_quotes(dtype) + " is not supported (stoke reads F32, F16, BF16 and U8)");
          entry.dtype = *parsed;
        } else if (key == "shape") {
          seen = &has_shape;
          entry.shape = parse_counts(tensor + "'s shape");
          for (const std::uint64_t dim : entry.shape) {
            // TensorRecord's dimensions are signed; an empty tensor could otherwise carry any of them.
            if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
              fail(tensor + ": dimension " + std::to_string(dim) + " in its shape is too large");
          }
        } else if (key == "data_offsets") {
          seen = &has_offsets;
          const std::vector<std::uint64_t> offsets = parse_counts(tensor + "'s data_offsets");
          if (offsets.size() != 2)
            fail(tensor + ": data_offsets must be [begin, end], got " + std::to_string(offsets.size()) + " numbers");
          entry.begin = offsets[0];
          entry.end = offsets[1];
        } else {
          fail(tensor + ": unknown key " + in_quotes(key) + " (expected dtype, shape and data_offsets)");
        }
        if (*seen) fail(tensor + ": the key " + in_quotes(key) + " appears twice");
        *seen = true;
      } while (consume(','));
      expect('}', "to close " + tensor + " (or a missing ',')");
    }
    if (!has_dtype || !has_shape || !has_offsets) {
      fail(tensor + ": missing " + (!has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets"));
    }
    return entry;
  }

  std::string_view text_;
  std::string_view source_;
  std::size_t pos_ = 0;
};

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
  }
  throw std::invalid_argument("safetensors: unknown DType " + std::to_string(static_cast<int>(dtype)));
}

std::vector<std::byte> encode_safetensors(const SafetensorsFile& file) {
  std::string json = "{";
  if (!file.metadata.empty()) {
    append_json_string(json, metadata_key);
    json += ":{";
    bool first = true;
    for (const auto& [key, value] : file.metadata) {
      if (!is_utf8(key) || !is_utf8(value))
        throw std::invalid_argument("write_safetensors: metadata " + in_quotes(key) + " is not valid UTF-8");
      if (!first) json += ',';
      first = false;
      append_json_string(json, key);
      json += ':';
      append_json_string(json, value);
    }
    json += '}';
  }

  std::set<std::string_view> names;
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
    if (json.size() > 1) json += ',';
    append_json_string(json, t.name);
    json += ":{\"dtype\":\"";
    json += safetensors_dtype_name(t.dtype);
    json += "\",\"shape\":[";
    for (std::size_t i = 0; i < shape.size(); ++i) json += (i ? "," : "") + std::to_string(shape[i]);
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.data.size()) + "]}";
    offset += t.data.size();
  }
  json += '}';
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
  Header header = HeaderParser(text, source).parse();
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
  file.header = HeaderParser(text, file.source).parse();
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
