// Helpers shared by the dataset sources (private to stoke::nodes).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace stoke::nodes::detail {

/// Throws std::out_of_range "<dataset>: item i is out of range (n items)".
[[noreturn]] inline void item_out_of_range(std::string_view dataset, std::size_t i, std::size_t size) {
  throw std::out_of_range(std::string(dataset) + ": item " + std::to_string(i) + " is out of range (the dataset has " +
                          std::to_string(size) + " items)");
}

}  // namespace stoke::nodes::detail
