// byte_size: sizes in bytes as people write them on a command line ("512M", "20GiB", "1.5G" not:
// whole numbers only), one rule for every option and parameter that takes one.
//
//   std::optional<std::uint64_t> budget = stoke::base::parse_byte_size("20G");  // 20 << 30
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace stoke::base {

/// Digits, then optionally K, M, G or T (powers of 1024; KiB, MiB, GiB, TiB too) or KB, MB, GB,
/// TB (powers of 1000), as `split -b` takes them. nullopt when `text` is not one, or overflows.
std::optional<std::uint64_t> parse_byte_size(std::string_view text);

}  // namespace stoke::base
