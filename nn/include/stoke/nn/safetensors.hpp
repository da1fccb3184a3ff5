// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors): named
// tensors with a dtype and a shape, plus string metadata, in one file that PyTorch, JAX and the
// `safetensors` Python package read as they are.
//
//   stoke::nn::SafetensorsFile file;
//   file.metadata["step"] = "1200";
//   file.tensors.push_back({.name = "fc.weight", .dtype = stoke::gpu::DType::f32, .shape = {2, 3},
//                           .data = bytes});   // 2 * 3 * 4 bytes, little-endian
//   stoke::nn::write_safetensors("model.safetensors", file);
//   stoke::nn::SafetensorsFile back = stoke::nn::read_safetensors("model.safetensors");
//
// The layout: an 8-byte little-endian header length N, N bytes of UTF-8 JSON
//   {"__metadata__":{"step":"1200"},"fc.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}
// padded with spaces to a multiple of 8, then the tensors' bytes, contiguous and in order, with
// data_offsets counted from the byte after the header. Element bytes are stored as they are in
// memory, which is little-endian on every platform stoke builds for.
//
// Host-only: no CUDA here; a tensor on a device is copied to the host before it is written.
// The functions keep no state and are safe to call from several threads on different paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoke/nn/device.hpp"

namespace stoke::nn {

/// One named tensor: its element type, its dimensions outermost first (empty for a scalar, which
/// holds one element; a zero dimension makes it empty), and its element bytes, row-major.
struct TensorRecord {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> data;  ///< product(shape) * element_size(dtype) bytes

  friend bool operator==(const TensorRecord&, const TensorRecord&) = default;
};

/// A whole file: its tensors, in the order their bytes are stored, and free-form string metadata
/// (the file's "__metadata__"; omitted from the file when empty).
struct SafetensorsFile {
  std::vector<TensorRecord> tensors;
  std::map<std::string, std::string> metadata;

  friend bool operator==(const SafetensorsFile&, const SafetensorsFile&) = default;
};

/// The bytes of `file` in the safetensors format (what write_safetensors writes). Throws
/// std::invalid_argument naming the tensor when a name is empty, "__metadata__", repeated or not
/// UTF-8, a dimension is negative, or data.size() is not product(shape) * element_size(dtype);
/// and for metadata that is not UTF-8.
std::vector<std::byte> encode_safetensors(const SafetensorsFile& file);

/// Parses the bytes of a safetensors file, treated as untrusted input: the header length, the
/// JSON (nlohmann-json's strict parser, then the format's structure: no name or key twice), the
/// dtypes (F32, F16, BF16, U8 and I32;
/// others are rejected), and the data_offsets (in range, the sizes dtype x shape asks for, and
/// together covering the data exactly, without gaps or overlaps). Throws std::runtime_error
/// beginning with `source` (the file's name, for the message) and saying what is wrong. Tensors
/// come back in the order of their bytes.
SafetensorsFile decode_safetensors(std::span<const std::byte> bytes, std::string_view source);

/// Writes `file` to `path` atomically: to `<path>.tmp` in the same folder, flushed to disk
/// (fsync), then renamed over `path`, so a crash leaves either the old file or the new one, never
/// half of one. Argument errors as encode_safetensors; I/O errors throw std::runtime_error naming
/// the path and the system's reason, and remove the .tmp file.
void write_safetensors(const std::filesystem::path& path, const SafetensorsFile& file);

/// Reads and checks the file at `path` (as decode_safetensors, reading the header before the
/// data so a bad header costs no more than its own bytes). Throws std::runtime_error naming the
/// path.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

/// The metadata of the file at `path`, reading only its header: the header is checked as
/// read_safetensors checks it, the tensors' offsets included against the file's size (so a
/// truncated file is an error here too), but no tensor bytes are read. Throws std::runtime_error
/// naming the path.
std::map<std::string, std::string> read_safetensors_metadata(const std::filesystem::path& path);

/// "F32", "F16", "BF16" or "U8": the format's name for `dtype`.
std::string_view safetensors_dtype_name(DType dtype);

}  // namespace stoke::nn
