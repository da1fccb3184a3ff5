// Writing a whole text file so that a reader never sees half of it.
#pragma once

#include <filesystem>
#include <string_view>

namespace stoke::train::detail {

/// Writes `text` to a temporary file next to `path` and renames it over `path`. Throws
/// std::runtime_error "cannot write the <what> <path>: <why>" (the temporary removed, a previous
/// file left as it was) when the folder is missing or not writable, or the disk is full.
void write_text_atomically(const std::filesystem::path& path, std::string_view text, std::string_view what);

}  // namespace stoke::train::detail
