// byte_size: sizes in bytes as people write them on a command line ("512M", "20GiB", "1.5G" not:
// whole numbers only), one rule for every option and parameter that takes one, and as the front
// ends print them.
//
//   std::optional<std::uint64_t> budget = stoke::base::parse_byte_size("20G");  // 20 << 30
//   std::string shown = stoke::base::byte_size_text(54'000'000);                // "54.0 MB"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stoke::base {

/// Digits, then optionally K, M, G or T (powers of 1024; KiB, MiB, GiB, TiB too) or KB, MB, GB,
/// TB (powers of 1000), as `split -b` takes them. nullopt when `text` is not one, or overflows.
std::optional<std::uint64_t> parse_byte_size(std::string_view text);

/// "532 bytes", "20.6 KB", "1.1 MB", "3.2 GB" (powers of 1000, one decimal).
std::string byte_size_text(std::uint64_t bytes);

}  // namespace stoke::base
