// The binary16 (f16) host conversions of dtype.hpp: known values, rounding ties to even, overflow
// to infinity, subnormals, NaN, and a round trip of every one of the 65536 bit patterns.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stoke/gpu/dtype.hpp>

namespace stoke::gpu {
namespace {

TEST(DTypeF16, SizeAndName) {
  EXPECT_EQ(element_size(DType::f16), 2u);
  EXPECT_EQ(to_string(DType::f16), "f16");
}

TEST(DTypeF16, KnownValues) {
  EXPECT_EQ(f16_from_float(0.0f), 0x0000);
  EXPECT_EQ(f16_from_float(-0.0f), 0x8000);
  EXPECT_EQ(f16_from_float(1.0f), 0x3c00);
  EXPECT_EQ(f16_from_float(-2.0f), 0xc000);
  EXPECT_EQ(f16_from_float(0.5f), 0x3800);
  EXPECT_EQ(f16_from_float(65504.0f), 0x7bff);  // the largest finite binary16
  EXPECT_EQ(f16_from_float(-65504.0f), 0xfbff);
  EXPECT_EQ(float_from_f16(0x3c00), 1.0f);
  EXPECT_EQ(float_from_f16(0xc000), -2.0f);
  EXPECT_EQ(float_from_f16(0x7bff), 65504.0f);
  EXPECT_EQ(float_from_f16(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_from_float(1.0f / 3.0f), 0x3555);
}

TEST(DTypeF16, OverflowRoundsToInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  // 65520 lies half-way between 65504 and 65536 (which would be the next one): ties to even go up,
  // to infinity. Just below it rounds down to the largest finite value.
  EXPECT_EQ(f16_from_float(65520.0f), 0x7c00);
  EXPECT_EQ(f16_from_float(-65520.0f), 0xfc00);
  EXPECT_EQ(f16_from_float(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(f16_from_float(1e10f), 0x7c00);
  EXPECT_EQ(f16_from_float(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(f16_from_float(inf), 0x7c00);
  EXPECT_EQ(f16_from_float(-inf), 0xfc00);
  EXPECT_EQ(float_from_f16(0x7c00), inf);
  EXPECT_EQ(float_from_f16(0xfc00), -inf);
}

TEST(DTypeF16, NormalAndSubnormalMinimums) {
  const float normal_min = std::ldexp(1.0f, -14);     // 6.103515625e-5
  const float subnormal_min = std::ldexp(1.0f, -24);  // 5.9604645e-8
  EXPECT_EQ(f16_from_float(normal_min), 0x0400);
  EXPECT_EQ(float_from_f16(0x0400), normal_min);
  EXPECT_EQ(f16_from_float(6.1035e-5f), 0x0400);  // within half an ulp (2^-25) of 2^-14
  // 6.1e-5 is 3.5e-8 below 2^-14, more than half an ulp: it rounds to the largest subnormal.
  EXPECT_EQ(f16_from_float(6.1e-5f), 0x03ff);
  EXPECT_EQ(f16_from_float(subnormal_min), 0x0001);
  EXPECT_EQ(float_from_f16(0x0001), subnormal_min);
  EXPECT_EQ(f16_from_float(5.96e-8f), 0x0001);
  EXPECT_EQ(f16_from_float(-subnormal_min), 0x8001);
  EXPECT_EQ(float_from_f16(0x03ff), std::ldexp(1023.0f, -24));  // the largest subnormal
  EXPECT_EQ(f16_from_float(std::ldexp(1023.0f, -24)), 0x03ff);
  // Half of the smallest subnormal is a tie between 0 and 0x0001: to even, zero. Anything more
  // rounds up; anything less is zero.
  EXPECT_EQ(f16_from_float(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(f16_from_float(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(f16_from_float(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(f16_from_float(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(f16_from_float(std::numeric_limits<float>::denorm_min()), 0x0000);
  // Just below 2^-14, rounding up into the smallest normal.
  EXPECT_EQ(f16_from_float(std::nextafter(normal_min, 0.0f)), 0x0400);
}

TEST(DTypeF16, RoundsToNearestTiesToEven) {
  // 1 + 2^-11 lies half-way between 1.0 (0x3c00) and 1 + 2^-10 (0x3c01): the even one, 1.0, wins.
  EXPECT_EQ(f16_from_float(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 lies half-way between 0x3c01 and 0x3c02: the even one wins, upwards.
  EXPECT_EQ(f16_from_float(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Off the tie, the nearest wins.
  EXPECT_EQ(f16_from_float(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  // 2047.5 is a tie between 2047 (0x67ff) and 2048 (0x6800): even is 2048, carrying into the exponent.
  EXPECT_EQ(f16_from_float(2047.5f), 0x6800);
  // Ties among subnormals: 1.5 and 2.5 times 2^-24 go to 2 (even).
  EXPECT_EQ(f16_from_float(std::ldexp(1.5f, -24)), 0x0002);
  EXPECT_EQ(f16_from_float(std::ldexp(2.5f, -24)), 0x0002);
  EXPECT_EQ(f16_from_float(std::ldexp(3.5f, -24)), 0x0004);
}

TEST(DTypeF16, NanBecomesCanonicalNan) {
  EXPECT_EQ(f16_from_float(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(f16_from_float(-std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(f16_from_float(std::numeric_limits<float>::signaling_NaN()), 0x7e00);
  EXPECT_EQ(f16_from_float(std::bit_cast<float>(0x7f800001u)), 0x7e00);  // a payload lost to rounding
  EXPECT_TRUE(std::isnan(float_from_f16(0x7e00)));
  EXPECT_TRUE(std::isnan(float_from_f16(0x7c01)));
}

TEST(DTypeF16, EveryBitPatternRoundTripsThroughFloat) {
  for (std::uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto bits = static_cast<std::uint16_t>(i);
    const float value = float_from_f16(bits);
    const bool is_nan = (bits & 0x7c00u) == 0x7c00u && (bits & 0x03ffu) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(value)) << "bits 0x" << std::hex << i;
      ASSERT_EQ(f16_from_float(value), 0x7e00) << "bits 0x" << std::hex << i;
    } else {
      ASSERT_EQ(f16_from_float(value), bits) << "bits 0x" << std::hex << i << " -> " << value;
      // The value is exact: it is the sign times mantissa times a power of two, computed here
      // independently of the bit tricks in float_from_f16.
      const int exponent = static_cast<int>((bits >> 10) & 0x1fu);
      const int mantissa = bits & 0x3ff;
      const float sign = (bits & 0x8000u) != 0 ? -1.0f : 1.0f;
      const float expected = exponent == 0x1f ? sign * std::numeric_limits<float>::infinity()
                             : exponent == 0  ? sign * std::ldexp(static_cast<float>(mantissa), -24)
                                              : sign * std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
      ASSERT_EQ(std::bit_cast<std::uint32_t>(value), std::bit_cast<std::uint32_t>(expected))
          << "bits 0x" << std::hex << i;
    }
  }
}

TEST(DTypeF16, ConversionsAreConstexpr) {
  static_assert(f16_from_float(1.0f) == 0x3c00);
  static_assert(float_from_f16(0x0001) == 5.9604644775390625e-8f);
  static_assert(f16_from_float(65520.0f) == 0x7c00);
}

}  // namespace
}  // namespace stoke::gpu
