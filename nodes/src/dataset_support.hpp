// Helpers shared by the dataset sources (private to stoke::nodes).
#pragma once

#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include "stoke/nodes/sample.hpp"

namespace stoke::nodes::detail {

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
