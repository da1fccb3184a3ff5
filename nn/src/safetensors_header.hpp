// The JSON header of a safetensors file (safetensors.hpp shows its shape), read and written with
// nlohmann-json. Private to stoke::nn.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nn/device.hpp"

namespace stoke::nn::safetensors {

/// The key of the file's free-form metadata in the header.
inline constexpr std::string_view metadata_key = "__metadata__";

/// A tensor's entry as the header gives it, before its bytes are read.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::uint64_t> shape;
  std::uint64_t begin = 0;  ///< data_offsets, from the first byte after the header
  std::uint64_t end = 0;
};

struct Header {
  std::vector<Entry> entries;  ///< in header order
  std::map<std::string, std::string> metadata;
};

/// Parses header JSON `text` as untrusted input: strict JSON (nlohmann's parser), then the
/// format's structure -- an object of tensor entries {"dtype", "shape", "data_offsets"} and an
/// optional "__metadata__" object of strings; no name or key twice; dtypes stoke reads;
/// non-negative integers. Does not check the offsets against each other or the data (see
/// check_layout in safetensors.cpp). Throws std::runtime_error beginning with "<source>: " and
/// saying what is wrong; syntax errors name their byte in `text`.
Header parse_header(std::string_view text, std::string_view source);

/// The header JSON of `entries` and `metadata` (omitted when empty), compact (no white space),
/// keys in the order given and each entry's keys as "dtype", "shape", "data_offsets"; control
/// characters in strings written as \u00XX. Not padded. Throws std::invalid_argument naming the
/// key when a name or a metadata entry is not valid UTF-8.
std::string format_header(const std::vector<Entry>& entries, const std::map<std::string, std::string>& metadata);

/// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF).
bool is_utf8(std::string_view text);

/// "F32", "F16", "BF16", "U8" or "I32" to the dtype; false for another name.
bool dtype_from_name(std::string_view name, DType& dtype);

}  // namespace stoke::nn::safetensors
