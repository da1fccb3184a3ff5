#include "safetensors_header.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <utility>

#include "stoke/nn/safetensors.hpp"

namespace stoke::nn::safetensors {
namespace {

using Json = nlohmann::json;

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

// What a header's JSON holds, walked by nlohmann's SAX parser: each event is checked against the
// place it comes in, and the first that does not fit throws with what was expected there. The
// entries and the metadata are collected on the way, so no document is built.
class HeaderReader final : public nlohmann::json_sax<Json> {
 public:
  HeaderReader(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  Header take() { return std::move(header_); }

  bool start_object(std::size_t /*size*/) override {
    switch (place_) {
      case Place::start:
        place_ = Place::header_key;
        return true;
      case Place::entry_value:
        if (key_ == metadata_key) {
          place_ = Place::metadata_key;
        } else {
          header_.entries.push_back({.name = key_, .dtype = DType::f32, .shape = {}, .begin = 0, .end = 0});
          fields_.clear();
          place_ = Place::tensor_key;
        }
        return true;
      default:
        unexpected("'{'");
    }
  }

  bool end_object() override {
    switch (place_) {
      case Place::header_key:
        place_ = Place::done;
        return true;
      case Place::metadata_key:
        place_ = Place::header_key;
        return true;
      case Place::tensor_key: {
        for (const char* field : {"dtype", "shape", "data_offsets"}) {
          if (!fields_.contains(field)) fail(tensor() + ": missing " + field);
        }
        place_ = Place::header_key;
        return true;
      }
      default:
        unexpected("'}'");  // nlohmann's grammar lets no other place see one
    }
  }

  bool key(std::string& name) override {
    key_ = name;
    switch (place_) {
      case Place::header_key:
        if (!names_.insert(name).second) fail("the name " + in_quotes(name) + " appears twice");
        place_ = Place::entry_value;
        return true;
      case Place::metadata_key:
        if (header_.metadata.contains(name)) fail("__metadata__ has the key " + in_quotes(name) + " twice");
        place_ = Place::metadata_value;
        return true;
      case Place::tensor_key:
        if (name != "dtype" && name != "shape" && name != "data_offsets") {
          fail(tensor() + ": unknown key " + in_quotes(name) + " (expected dtype, shape and data_offsets)");
        }
        if (!fields_.insert(name).second) fail(tensor() + ": the key " + in_quotes(name) + " appears twice");
        place_ = Place::tensor_value;
        return true;
      default:
        unexpected("a key");
    }
  }

  bool string(std::string& value) override {
    if (place_ == Place::metadata_value) {
      header_.metadata.emplace(key_, std::move(value));
      place_ = Place::metadata_key;
      return true;
    }
    if (place_ == Place::tensor_value && key_ == "dtype") {
      if (!dtype_from_name(value, entry().dtype)) {
        fail(tensor() + ": dtype " + in_quotes(value) + " is not supported (stoke reads F32, F16, BF16 and U8)");
      }
      place_ = Place::tensor_key;
      return true;
    }
    unexpected("a string");
  }

  bool start_array(std::size_t /*size*/) override {
    if (place_ != Place::tensor_value || key_ == "dtype") unexpected("'['");
    counts_.clear();
    place_ = Place::counts;
    return true;
  }

  bool end_array() override {
    if (place_ != Place::counts) unexpected("']'");
    Entry& e = entry();
    if (key_ == "shape") {
      for (const std::uint64_t dim : counts_) {
        // TensorRecord's dimensions are signed; an empty tensor could otherwise carry any of them.
        if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
          fail(tensor() + ": dimension " + std::to_string(dim) + " in its shape is too large");
        }
      }
      e.shape = counts_;
    } else {
      if (counts_.size() != 2) {
        fail(tensor() + ": data_offsets must be [begin, end], got " + std::to_string(counts_.size()) + " numbers");
      }
      e.begin = counts_[0];
      e.end = counts_[1];
    }
    place_ = Place::tensor_key;
    return true;
  }

  bool number_unsigned(number_unsigned_t value) override {
    if (place_ != Place::counts) unexpected("a number");
    counts_.push_back(value);
    return true;
  }

  bool number_integer(number_integer_t /*value*/) override {
    // nlohmann reports only numbers written with a minus sign here.
    unexpected("a negative number");
  }

  bool number_float(number_float_t /*value*/, const std::string& text) override {
    if (place_ != Place::counts) unexpected("a number");
    // nlohmann reads an integer too large for 64 bits as a float: no '.', 'e' or 'E' tells it apart.
    if (text.find_first_of(".eE") == std::string::npos) fail_here("a number too large (" + counts_what() + ")");
    fail_here("expected an integer, found a fraction or exponent (" + counts_what() + ")");
  }

  bool boolean(bool value) override { unexpected(value ? "true" : "false"); }
  bool null() override { unexpected("null"); }
  bool binary(binary_t& /*value*/) override { unexpected("binary data"); }

  // A syntax error, as nlohmann's lexer and parser describe it: said again in terms of the place.
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& error) override {
    const std::size_t byte = position > 0 ? position - 1 : 0;  // the last byte read
    const std::string what = error.what();
    const std::size_t dash = what.find(" - ");
    const std::string detail = dash == std::string::npos ? what : what.substr(dash + 3);
    const std::size_t semicolon = detail.find("; expected ");
    const std::string expected = semicolon == std::string::npos ? "" : detail.substr(semicolon + 11);
    const std::string problem = detail.substr(0, std::min(detail.find(';'), detail.size()));
    const std::string found = problem.find("end of input") != std::string::npos || byte >= text_.size()
                                  ? "the end"
                                  : quoted_byte(text_[byte]);
    const auto at_byte = [&](const std::string& message) -> bool {
      fail("header JSON at byte " + std::to_string(byte) + ": " + message);
    };

    if (expected == "end of input") return at_byte("unexpected text after the header's closing '}'");
    if (problem.starts_with("invalid string: ")) return at_byte(string_problem(problem, last_token));
    if (problem == "unexpected number literal" && after_leading_zero(byte)) {
      return at_byte(place_ == Place::counts ? "a number with a leading zero (" + counts_what() + ")"
                                             : std::string("a number with a leading zero"));
    }
    if (expected == "':'") return at_byte("expected ':' after " + in_quotes(key_) + ", found " + found);
    if (expected == "string literal") return at_byte("expected " + expected_key() + ", found " + found);
    if (expected == "'}'") return at_byte("expected '}' " + closing() + " (or a missing ','), found " + found);
    if (expected == "']'") return at_byte("expected ']' or ',' in " + counts_what() + ", found " + found);
    if (expected.empty() || expected.starts_with("'[', '{', or a literal")) {
      return at_byte("expected " + expected_value() + ", found " + found);
    }
    return at_byte(detail);
  }

 private:
  // Where the next event comes: what the header's grammar expects there.
  enum class Place {
    start,           // the header's '{'
    header_key,      // a tensor's name or "__metadata__", or the header's '}'
    entry_value,     // the '{' of the entry named key_
    metadata_key,    // a metadata key, or __metadata__'s '}'
    metadata_value,  // the string of metadata key key_
    tensor_key,      // "dtype", "shape" or "data_offsets", or the entry's '}'
    tensor_value,    // the value of the entry's field key_
    counts,          // a number of the array of field key_, or its ']'
    done,            // nothing: the header has ended
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(std::string(source_) + ": " + what);
  }
  // A semantic error inside the JSON: where nlohmann does not say, "header JSON" does.
  [[noreturn]] void fail_here(const std::string& what) const { fail("header JSON: " + what); }
  [[noreturn]] void unexpected(const std::string& found) const {
    fail_here("expected " + expected_value() + ", found " + found);
  }

  Entry& entry() { return header_.entries.back(); }
  // The entry being read; only asked for inside one, but a garbled header must not make it crash.
  std::string tensor() const {
    return header_.entries.empty() ? std::string("the header") : "tensor " + in_quotes(header_.entries.back().name);
  }
  std::string counts_what() const { return tensor() + "'s " + key_; }

  // The value expected at place_, for messages.
  std::string expected_value() const {
    switch (place_) {
      case Place::start:
        return "'{' at the start of the header";
      case Place::entry_value:
        return key_ == metadata_key ? "'{' to open __metadata__" : "'{' to open tensor " + in_quotes(key_);
      case Place::metadata_value:
        return "a string (__metadata__ " + in_quotes(key_) + " must be a string)";
      case Place::tensor_value:
        return key_ == "dtype" ? "a string (" + tensor() + "'s dtype)" : "'[' to open " + counts_what();
      case Place::counts:
        return "a non-negative integer (" + counts_what() + ")";
      case Place::done:
        return "the end of the header";
      default:
        return expected_key();
    }
  }

  std::string expected_key() const {
    switch (place_) {
      case Place::metadata_key:
        return "a string (a __metadata__ key)";
      case Place::tensor_key:
        return "a string (a key of " + tensor() + ")";
      default:
        return "a string (a tensor name)";
    }
  }

  std::string closing() const {
    switch (place_) {
      case Place::metadata_key:
        return "to close __metadata__";
      case Place::tensor_key:
        return "to close " + tensor();
      default:
        return "after a tensor's entry";
    }
  }

  // nlohmann reads "01" as the number 0 followed by another number: a number token that
  // starts right after a digit had a leading zero.
  bool after_leading_zero(std::size_t byte) const {
    std::size_t start = byte;
    while (start > 0 && text_[start - 1] >= '0' && text_[start - 1] <= '9') --start;
    const std::string_view number = text_.substr(start, byte + 1 - start);
    return number.size() > 1 && number[0] == '0';
  }

  static std::string quoted_byte(char ch) {
    const auto byte = static_cast<unsigned char>(ch);
    if (byte >= 0x20 && byte < 0x7f) return "'" + std::string(1, ch) + "'";
    char text[16];
    std::snprintf(text, sizeof text, "byte 0x%02x", byte);
    return text;
  }

  // nlohmann's lexer's complaint about a string, in stoke's words.
  static std::string string_problem(const std::string& problem, const std::string& last_token) {
    const std::string reason = problem.substr(16);  // after "invalid string: "
    if (reason == "missing closing quote") return "a string is not closed";
    if (reason == "forbidden character after backslash") {
      return "unknown escape '\\" + std::string(1, last_token.empty() ? '?' : last_token.back()) + "' in a string";
    }
    if (reason.find("must be followed by 4 hex digits") != std::string::npos)
      return "a \\u escape needs four hex digits";
    if (reason.starts_with("surrogate U+DC00..U+DFFF")) return "a \\u escape holds a lone low surrogate";
    if (reason.starts_with("surrogate U+D800..U+DBFF")) return "a \\u escape holds a lone high surrogate";
    if (reason == "ill-formed UTF-8 byte") return "a string is not valid UTF-8";
    if (reason.starts_with("control character")) return "a control character inside a string";
    return "a string is invalid: " + reason;
  }

  std::string_view text_;
  std::string_view source_;
  Header header_;
  Place place_ = Place::start;
  std::string key_;                    // the last key read
  std::set<std::string> names_;        // the header's keys so far
  std::set<std::string> fields_;       // the current entry's keys so far
  std::vector<std::uint64_t> counts_;  // the current array's numbers
};

// nlohmann writes \b \f \n \r \t for those five control characters, while stoke has always
// spelled every control character \u00xx (as a checkpoint's metadata of class names, one per
// line, shows): a checkpoint's bytes stay what they were whichever library wrote them.
std::string with_unicode_escapes(const std::string& json) {
  std::string out;
  out.reserve(json.size());
  for (std::size_t i = 0; i < json.size(); ++i) {
    out += json[i];
    if (json[i] != '\\' || i + 1 == json.size()) continue;
    const char next = json[++i];  // a backslash in dumped JSON always starts an escape
    const char* spelled = next == 'b'   ? "u0008"
                          : next == 't' ? "u0009"
                          : next == 'n' ? "u000a"
                          : next == 'f' ? "u000c"
                          : next == 'r' ? "u000d"
                                        : nullptr;
    if (spelled != nullptr) {
      out += spelled;
    } else {
      out += next;
    }
  }
  return out;
}

}  // namespace

Header parse_header(std::string_view text, std::string_view source) {
  HeaderReader reader(text, source);
  try {
    Json::sax_parse(text.begin(), text.end(), &reader);
  } catch (const nlohmann::json::exception& error) {
    // The reader reports every parse error itself; this is for anything else nlohmann may throw.
    throw std::runtime_error(std::string(source) + ": header JSON: " + error.what());
  }
  return reader.take();
}

std::string format_header(const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json& values = header[std::string(metadata_key)] = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) values[key] = value;
  }
  for (const Entry& e : entries) {
    header[e.name] = {
        {"dtype", safetensors_dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  try {
    return with_unicode_escapes(header.dump());
  } catch (const nlohmann::json::type_error& error) {
    throw std::invalid_argument(std::string("write_safetensors: a name or metadata is not valid UTF-8: ") +
                                error.what());
  }
}

bool is_utf8(std::string_view text) {
  try {
    (void)Json(std::string(text)).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

bool dtype_from_name(std::string_view name, DType& dtype) {
  for (const DType candidate : {DType::f32, DType::f16, DType::bf16, DType::u8, DType::i32}) {
    if (name == safetensors_dtype_name(candidate)) {
      dtype = candidate;
      return true;
    }
  }
  return false;
}

}  // namespace stoke::nn::safetensors
