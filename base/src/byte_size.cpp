#include "stoke/base/byte_size.hpp"

#include <charconv>
#include <cstdint>
#include <utility>

namespace stoke::base {

std::optional<std::uint64_t> parse_byte_size(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end == text.data()) return std::nullopt;
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  static constexpr std::pair<std::string_view, std::uint64_t> units[] = {{"", 1},
                                                                         {"K", 1ULL << 10},
                                                                         {"M", 1ULL << 20},
                                                                         {"G", 1ULL << 30},
                                                                         {"T", 1ULL << 40},
                                                                         {"KiB", 1ULL << 10},
                                                                         {"MiB", 1ULL << 20},
                                                                         {"GiB", 1ULL << 30},
                                                                         {"TiB", 1ULL << 40},
                                                                         {"KB", 1000ULL},
                                                                         {"MB", 1000000ULL},
                                                                         {"GB", 1000000000ULL},
                                                                         {"TB", 1000000000000ULL}};
  for (const auto& [name, scale] : units) {
    if (unit != name) continue;
    if (value > UINT64_MAX / scale) return std::nullopt;
    return value * scale;
  }
  return std::nullopt;
}

}  // namespace stoke::base
