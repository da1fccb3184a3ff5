// write_file_atomically: a whole file or none -- the one way stoke's layers write a file that a
// reader (another process, a rerun after a crash) may look at while it is being written.
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string_view>

namespace stoke::base {

/// Writes `bytes` to `path` so that a reader sees the previous file or the whole new one, never a
/// part: into a temporary file beside it (named after the process and a random number, so that
/// writers racing for one path do not share it), then rename(2) over `path`. No fsync: what a
/// crash cuts short is the temporary, not `path`. Throws std::runtime_error
/// "cannot write the <what> <path>: <why>" when it cannot (a missing or read-only folder, a full
/// disk), the temporary removed and a previous file left as it was.
void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes,
                           std::string_view what);

/// The same for text.
inline void write_file_atomically(const std::filesystem::path& path, std::string_view text, std::string_view what) {
  write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())), what);
}

}  // namespace stoke::base
