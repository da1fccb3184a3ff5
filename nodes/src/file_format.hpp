// What stoke's own file formats share (private to stoke::nodes): little-endian fields written byte
// by byte so that a file does not depend on the host, the FNV-1a checksum of its header or index,
// and a temporary file beside a destination that a finished write renames into place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

namespace stoke::nodes::detail {

inline void put_u32(std::byte* at, std::uint32_t value) {
  for (int b = 0; b < 4; ++b) at[b] = static_cast<std::byte>(value >> (8 * b));
}
inline void put_u64(std::byte* at, std::uint64_t value) {
  for (int b = 0; b < 8; ++b) at[b] = static_cast<std::byte>(value >> (8 * b));
}
inline std::uint32_t get_u32(const std::byte* at) {
  std::uint32_t value = 0;
  for (int b = 0; b < 4; ++b) value |= std::uint32_t{std::to_integer<std::uint8_t>(at[b])} << (8 * b);
  return value;
}
inline std::uint64_t get_u64(const std::byte* at) {
  std::uint64_t value = 0;
  for (int b = 0; b < 8; ++b) value |= std::uint64_t{std::to_integer<std::uint8_t>(at[b])} << (8 * b);
  return value;
}
inline void append_u32(std::vector<std::byte>& out, std::uint32_t value) {
  out.resize(out.size() + 4);
  put_u32(out.data() + out.size() - 4, value);
}
inline void append_u64(std::vector<std::byte>& out, std::uint64_t value) {
  out.resize(out.size() + 8);
  put_u64(out.data() + out.size() - 8, value);
}

/// FNV-1a 64 of `bytes`, with [skip, skip + 8) taken as zero (where the checksum itself lives).
inline std::uint64_t fnv1a(std::span<const std::byte> bytes, std::size_t skip = std::size_t(-1)) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const unsigned byte = (i >= skip && i - skip < 8) ? 0U : std::to_integer<unsigned>(bytes[i]);
    hash = (hash ^ byte) * 0x100000001b3ULL;
  }
  return hash;
}

/// Creates "<destination>.tmp-<pid>-<random>" exclusively (write-only, close-on-exec), sets `temp`
/// to its path and returns its descriptor; -1 with errno set when it cannot (tries 100 names).
int create_temp_beside(const std::filesystem::path& destination, std::filesystem::path& temp);

}  // namespace stoke::nodes::detail
