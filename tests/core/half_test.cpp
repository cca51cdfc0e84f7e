// float <-> f16/bf16 conversions (core/half.h) against independent references: the compiler's
// IEEE binary16 type `_Float16` (GCC >= 12 on x86-64 rounds float -> _Float16 to nearest even)
// and, for bf16, a reference written here with exact double arithmetic.
#include "stoker/core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "test_util.h"

namespace stoker::core {
namespace {

uint16_t f16_ref_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

float f16_ref_to_float(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

bool half_is_nan(uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

// Checks one float against the _Float16 reference; NaN only needs to stay NaN.
::testing::AssertionResult half_matches_reference(float f) {
  const uint16_t got = float_to_half_bits(f);
  const uint16_t want = f16_ref_bits(f);
  if (std::isnan(f)) {
    if (half_is_nan(got)) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << "NaN (bits 0x" << std::hex << float_bits(f) << ") became 0x" << got;
  }
  if (got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "float " << f << " (bits 0x" << std::hex << float_bits(f)
                                       << "): got 0x" << got << ", want 0x" << want;
}

// Reference float -> bf16 (RNE) written with exact double arithmetic: pick the nearer of the two
// bf16 neighbours of |f| (truncated and truncated + 1 ulp), ties to the even one. Overflow: the
// neighbour above the largest finite bf16 is 2^128, which rounds to Inf like IEEE requires.
uint16_t bf16_reference_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // any NaN
  if (abs == 0x7f800000u) return static_cast<uint16_t>(u >> 16);
  const uint32_t lo_bits = abs & 0xffff0000u;
  const uint32_t hi_bits = lo_bits + 0x10000u;
  const double x = std::fabs(static_cast<double>(f));
  const double lo = static_cast<double>(bits_float(lo_bits));
  const double hi =
      hi_bits == 0x7f800000u ? std::ldexp(1.0, 128) : static_cast<double>(bits_float(hi_bits));
  uint32_t pick;
  if (x - lo < hi - x) {
    pick = lo_bits;
  } else if (x - lo > hi - x) {
    pick = hi_bits;
  } else {
    pick = (lo_bits & 0x10000u) ? hi_bits : lo_bits;
  }
  return static_cast<uint16_t>((sign | pick) >> 16);
}

// Reference bf16 -> float from the fields (sign, 8-bit exponent, 7-bit mantissa) in double.
double bf16_reference_value(uint16_t b) {
  const int sign = b >> 15;
  const int exp = (b >> 7) & 0xff;
  const int mant = b & 0x7f;
  double v;
  if (exp == 0xff) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(mant / 128.0, -126);
  } else {
    v = std::ldexp(1.0 + mant / 128.0, exp - 127);
  }
  return sign ? -v : v;
}

float from_bits(uint32_t u) { return bits_float(u); }

TEST(HalfTest, FloatToHalfBoundaries) {
  const std::vector<float> cases = {
      0.0f,
      -0.0f,
      1.0f,
      -1.0f,
      1.0f / 3.0f,
      65504.0f,
      -65504.0f,
      65519.99f,                       // just below the Inf threshold: 65504
      std::nextafter(65520.0f, 0.0f),  // 65519.996: still 65504
      65520.0f,
      -65520.0f,  // tie between 65504 and 65536: Inf
      70000.0f,
      1e30f,
      test::kInf,
      -test::kInf,
      std::numeric_limits<float>::max(),
      std::ldexp(1.0f, -14),                        // smallest normal half
      std::nextafter(std::ldexp(1.0f, -14), 0.0f),  // rounds up to the smallest normal
      std::ldexp(1.0f, -15),
      std::ldexp(1.0f, -24),                        // smallest subnormal
      std::ldexp(1.0f, -25),                        // tie between 0 and 2^-24: 0 (even)
      -std::ldexp(1.0f, -25),                       // -0
      std::nextafter(std::ldexp(1.0f, -25), 1.0f),  // just above the tie: 2^-24
      std::nextafter(std::ldexp(1.0f, -25), 0.0f),  // just below: 0
      std::ldexp(1.5f, -24),                        // tie 1 vs 2 subnormal ulps: 2 (even)
      std::ldexp(2.5f, -24),                        // tie 2 vs 3: 2 (even)
      std::ldexp(1023.5f, -24),      // tie between largest subnormal and smallest normal
      1.0f + std::ldexp(1.0f, -11),  // tie: 1.0 (even)
      1.0f + std::ldexp(3.0f, -11),  // tie: 1 + 2^-9 (even)
      1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -23),  // just above tie: up
      2048.0f + 1.0f,
      2048.0f + 3.0f,
      std::ldexp(1.0f, -30),
      std::numeric_limits<float>::min(),
      std::numeric_limits<float>::denorm_min(),
      -std::numeric_limits<float>::denorm_min(),
      test::kNaN,
      -test::kNaN,
      from_bits(0x7f800001u),
      from_bits(0x7fc00001u),
      from_bits(0xffbfffffu),
      from_bits(0x7f802000u),
      from_bits(0x7fffffffu)};
  for (float f : cases) EXPECT_TRUE(half_matches_reference(f));

  // Explicit expectations that do not lean on the reference.
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7bffu);
  EXPECT_EQ(float_to_half_bits(65519.99f), 0x7bffu);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00u);
  EXPECT_EQ(float_to_half_bits(-65520.0f), 0xfc00u);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -25)), 0x0000u);
  EXPECT_EQ(float_to_half_bits(-std::ldexp(1.0f, -25)), 0x8000u);
  EXPECT_EQ(float_to_half_bits(std::ldexp(1.0f, -24)), 0x0001u);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000u);
  EXPECT_EQ(float_to_half_bits(test::kInf), 0x7c00u);
  EXPECT_EQ(float_to_half_bits(-test::kInf), 0xfc00u);
  // NaN with payload bits only below the f16 mantissa must still be NaN, not Inf.
  EXPECT_TRUE(half_is_nan(float_to_half_bits(from_bits(0x7f800001u))));
  EXPECT_TRUE(half_is_nan(float_to_half_bits(from_bits(0xff800001u))));
}

TEST(HalfTest, FloatToHalfMatchesFloat16OnRandomFloats) {
  std::mt19937 gen(1234);
  // Uniform over all bit patterns (mostly far outside the half range).
  for (int i = 0; i < 200000; ++i) ASSERT_TRUE(half_matches_reference(from_bits(gen())));
  // Every exponent near the half range, each sign, with random mantissas and mantissas whose
  // 13 dropped bits sit just below, on and just above the rounding tie.
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exp = 95; exp <= 145; ++exp) {
      for (int j = 0; j < 4000; ++j) {
        uint32_t mant = gen() & 0x7fffffu;
        if (j % 4 == 1) mant = (mant & ~0x1fffu) | 0x0fffu;
        if (j % 4 == 2) mant = (mant & ~0x1fffu) | 0x1000u;
        if (j % 4 == 3) mant = (mant & ~0x1fffu) | 0x1001u;
        ASSERT_TRUE(half_matches_reference(from_bits((sign << 31) | (exp << 23) | mant)));
      }
    }
  }
  // Every float whose magnitude lies in the subnormal-result range [2^-26, 2^-14) at a stride
  // that still visits every tie position of the mantissa's kept bits.
  for (uint32_t u = 0x32800000u; u < 0x38800000u; u += 0x3fu)
    ASSERT_TRUE(half_matches_reference(from_bits(u)));
}

TEST(HalfTest, HalfToFloatExhaustive) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float got = half_bits_to_float(h);
    const float want = f16_ref_to_float(h);
    if (half_is_nan(h)) {
      ASSERT_TRUE(std::isnan(got)) << "half 0x" << std::hex << b;
      continue;
    }
    ASSERT_EQ(float_bits(got), float_bits(want))
        << "half 0x" << std::hex << b << ": got " << got << ", want " << want;
  }
}

TEST(HalfTest, HalfRoundTripsThroughFloat) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const uint16_t back = float_to_half_bits(half_bits_to_float(h));
    if (half_is_nan(h)) {
      ASSERT_TRUE(half_is_nan(back)) << std::hex << b;
    } else {
      ASSERT_EQ(back, h) << std::hex << b;
    }
  }
}

TEST(HalfTest, HalfStructUsesTheConversions) {
  std::mt19937 gen(7);
  for (int i = 0; i < 10000; ++i) {
    const float f = test::random_floats(1, gen(), -70000.0f, 70000.0f)[0];
    const Half h(f);
    EXPECT_EQ(h.bits, f16_ref_bits(f));
    EXPECT_EQ(float_bits(static_cast<float>(h)), float_bits(f16_ref_to_float(h.bits)));
  }
  EXPECT_EQ(Half::from_bits(0x3c00u).bits, 0x3c00u);
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x3c00u)), 1.0f);
  EXPECT_EQ(static_cast<float>(Half::from_bits(0xc000u)), -2.0f);
}

TEST(BFloat16Test, FloatToBf16TiesAndBoundaries) {
  struct Case {
    uint32_t in;
    uint16_t want;
  };
  const std::vector<Case> cases = {
      {0x3f800000u, 0x3f80u},  // 1.0
      {0x3f808000u, 0x3f80u},  // tie, kept bit even: down
      {0x3f818000u, 0x3f82u},  // tie, kept bit odd: up
      {0x3f807fffu, 0x3f80u},  // below tie: down
      {0x3f808001u, 0x3f81u},  // above tie: up
      {0xbf818000u, 0xbf82u},  // negative tie, odd: away from zero
      {0xbf808000u, 0xbf80u},  // negative tie, even: toward zero
      {0x3f7fffffu, 0x3f80u},  // rounds up into the exponent
      {0x7f7f7fffu, 0x7f7fu},  // largest finite bf16 stays
      {0x7f7f8000u, 0x7f80u},  // tie above largest finite (odd): Inf
      {0x7f7fffffu, 0x7f80u},  // FLT_MAX: Inf
      {0xff7fffffu, 0xff80u},  // -FLT_MAX: -Inf
      {0x7f800000u, 0x7f80u},  // Inf
      {0xff800000u, 0xff80u},  // -Inf
      {0x00000000u, 0x0000u},  // +0
      {0x80000000u, 0x8000u},  // -0
      {0x00008000u, 0x0000u},  // subnormal tie, even: 0
      {0x00018000u, 0x0002u},  // subnormal tie, odd: up
      {0x80008001u, 0x8001u},  // negative subnormal above tie
      {0x007fffffu, 0x0080u},  // largest subnormal float: smallest normal bf16
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_bf16_bits(from_bits(c.in)), c.want) << std::hex << "0x" << c.in;
    EXPECT_EQ(bf16_reference_bits(from_bits(c.in)), c.want) << "reference, 0x" << std::hex << c.in;
  }
  // NaN stays NaN: a NaN whose payload sits only in the low 16 bits must not become Inf, and an
  // all-ones NaN must not wrap into the sign bit.
  for (uint32_t u : {0x7f800001u, 0x7f80ffffu, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0xffffffffu,
                     0xffc00000u}) {
    const uint16_t b = float_to_bf16_bits(from_bits(u));
    EXPECT_TRUE(bf16_is_nan(b)) << std::hex << "0x" << u << " -> 0x" << b;
    EXPECT_EQ(b & 0x8000u, (u >> 16) & 0x8000u) << "sign of NaN 0x" << std::hex << u;
  }
}

TEST(BFloat16Test, FloatToBf16MatchesDoubleReference) {
  std::mt19937 gen(99);
  for (int i = 0; i < 1000000; ++i) {
    uint32_t u = gen();
    if (i % 3 == 1) u = (u & ~0xffffu) | 0x8000u;                               // exact ties
    if (i % 3 == 2) u = (u & ~0xffffu) | (0x8000u + ((i & 1) ? 1u : 0xffffu));  // +-1 around
    const float f = from_bits(u);
    const uint16_t got = float_to_bf16_bits(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(bf16_is_nan(got)) << std::hex << u;
      continue;
    }
    ASSERT_EQ(got, bf16_reference_bits(f)) << "float bits 0x" << std::hex << u;
  }
}

TEST(BFloat16Test, Bf16ToFloatExhaustive) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float got = bf16_bits_to_float(h);
    const double want = bf16_reference_value(h);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << std::hex << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(got), want) << "bf16 0x" << std::hex << b;
    ASSERT_EQ(std::signbit(got), (b & 0x8000u) != 0) << std::hex << b;
    // Round trip back to the same bits.
    ASSERT_EQ(float_to_bf16_bits(got), h) << std::hex << b;
  }
}

TEST(BFloat16Test, StructUsesTheConversions) {
  const BFloat16 one(1.0f);
  EXPECT_EQ(one.bits, 0x3f80u);
  EXPECT_EQ(static_cast<float>(BFloat16::from_bits(0xc040u)), -3.0f);
  const BFloat16 third(1.0f / 3.0f);
  EXPECT_EQ(third.bits, bf16_reference_bits(1.0f / 3.0f));
}

}  // namespace
}  // namespace stoker::core
