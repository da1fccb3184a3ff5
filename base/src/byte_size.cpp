#include "stoke/base/byte_size.hpp"

#include <charconv>
#include <cstdint>
#include <cstdio>
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

std::string byte_size_text(std::uint64_t bytes) {
  if (bytes < 1000) return std::to_string(bytes) + " bytes";
  static constexpr const char* units[] = {"KB", "MB", "GB", "TB"};
  double value = static_cast<double>(bytes) / 1e3;
  int unit = 0;
  while (value >= 1000 && unit < 3) {
    value /= 1e3;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  return text;
}

}  // namespace stoke::base
