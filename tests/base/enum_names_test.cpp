// base::EnumNames: one table per enum, both directions and the list of choices.
#include "stoke/base/enum_names.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace stoke::base {
namespace {

enum class Fruit : std::uint8_t { apple, pear, plum, fig };

constexpr EnumNames<Fruit, 3> fruit_names{{{{Fruit::apple, "apple"}, {Fruit::pear, "pear"}, {Fruit::plum, "plum"}}}};

TEST(EnumNames, NamesAndFindsBothWays) {
  static_assert(fruit_names.name(Fruit::pear) == "pear");
  static_assert(fruit_names.find("plum") == Fruit::plum);
  EXPECT_EQ(fruit_names.name(Fruit::apple), "apple");
  EXPECT_EQ(fruit_names.name(Fruit::fig), "unknown");
  EXPECT_EQ(fruit_names.name(Fruit::fig, "apple"), "apple");
  EXPECT_EQ(fruit_names.find("pear"), Fruit::pear);
  EXPECT_FALSE(fruit_names.find("Pear").has_value()) << "exact words only";
  EXPECT_FALSE(fruit_names.find("").has_value());
}

TEST(EnumNames, ChoicesListTheNamesInTheTablesOrder) {
  EXPECT_EQ(fruit_names.choices(), "apple, pear or plum");
  EXPECT_EQ(fruit_names.choices(", "), "apple, pear, plum");
  constexpr EnumNames<Fruit, 1> one{{{{Fruit::fig, "fig"}}}};
  EXPECT_EQ(one.choices(), "fig");
  constexpr EnumNames<Fruit, 2> two{{{{Fruit::fig, "fig"}, {Fruit::plum, "plum"}}}};
  EXPECT_EQ(two.choices(), "fig or plum");
}

}  // namespace
}  // namespace stoke::base
