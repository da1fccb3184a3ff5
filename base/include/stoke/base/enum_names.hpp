// EnumNames: an enum's names written once -- for to_string, for reading a command-line word or a
// JSON field back, and for the list of choices an error message gives.
//
//   inline constexpr stoke::base::EnumNames<Color, 2> color_names{{{{Color::red, "red"}, {Color::blue, "blue"}}}};
//   color_names.name(Color::red);   // "red"
//   color_names.find("blue");       // Color::blue; std::nullopt for a word not in the table
//   color_names.choices();          // "red or blue", for "--color must be red or blue (got 'x')"
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace stoke::base {

template <class E, std::size_t N>
struct EnumNames {
  std::array<std::pair<E, std::string_view>, N> names;

  /// The name of `value`; `fallback` for a value not in the table.
  constexpr std::string_view name(E value, std::string_view fallback = "unknown") const noexcept {
    for (const auto& [e, n] : names) {
      if (e == value) return n;
    }
    return fallback;
  }
  /// The value named `text` (exactly), or nothing.
  constexpr std::optional<E> find(std::string_view text) const noexcept {
    for (const auto& [e, n] : names) {
      if (n == text) return e;
    }
    return std::nullopt;
  }
  /// The names in the table's order as a phrase: "a, b or c" (`last` between the last two).
  std::string choices(std::string_view last = " or ") const {
    std::string text;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) text += i + 1 == N ? last : std::string_view(", ");
      text += names[i].second;
    }
    return text;
  }
};

}  // namespace stoke::base
