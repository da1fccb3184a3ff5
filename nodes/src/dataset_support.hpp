// Helpers shared by the dataset sources (private to stoke::nodes).
#pragma once

#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "stoke/nodes/sample.hpp"

namespace stoke::nodes::detail {

/// The largest class label a text field may hold (a file list's column, a tar shard's .cls
/// member): labels index classes(), which names every label up to the largest, so a typo such as
/// 10000000 would otherwise allocate millions of names.
inline constexpr int max_text_label = 999999;

/// A path as text, for messages.
inline std::string str(const std::filesystem::path& path) { return path.string(); }

/// Spaces, tabs and line ends.
inline constexpr std::string_view whitespace = " \t\r\n";

/// `text` without the whitespace around it.
inline std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(whitespace);
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(whitespace);
  return text.substr(first, last - first + 1);
}

/// Throws std::out_of_range "<dataset>: item i is out of range (n items)".
[[noreturn]] inline void item_out_of_range(std::string_view dataset, std::size_t i, std::size_t size) {
  throw std::out_of_range(std::string(dataset) + ": item " + std::to_string(i) + " is out of range (the dataset has " +
                          std::to_string(size) + " items)");
}

/// The Sample of a dataset item that is a whole file: its bytes, label, index and path as name.
inline Sample read_file_sample(const std::filesystem::path& file, int label, std::size_t index) {
  Sample sample;
  sample.bytes = Bytes(read_file(file.string()));
  sample.encoding = Encoding::encoded;
  sample.label = label;
  sample.index = index;
  sample.name = file.string();
  return sample;
}

}  // namespace stoke::nodes::detail
