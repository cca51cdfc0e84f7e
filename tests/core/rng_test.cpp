// Philox-4x32-10 against Random123's known-answer vectors, the portable math against libm, and
// the statistical and layout properties the fills rely on (core/rng.h).
#include "stoker/core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "test_util.h"

namespace stoker::core {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

// Random123 kat_vectors, philox4x32 with 10 rounds: counter, key, expected output.
struct Kat {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t out[4];
};

TEST(RngTest, Philox4x32_10KnownAnswers) {
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const Philox4 r =
        philox4x32_10(Philox4{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, k.key[0], k.key[1]);
    for (int lane = 0; lane < 4; ++lane) {
      EXPECT_EQ(r.v[lane], k.out[lane])
          << std::hex << "counter 0x" << k.ctr[0] << " key 0x" << k.key[0] << " lane " << lane;
    }
  }
}

TEST(RngTest, PhiloxBlockDependsOnSeedStreamAndBlock) {
  const Philox4 base = philox_block(42, 0, 0);
  const Philox4 others[] = {philox_block(43, 0, 0), philox_block(42ull | (1ull << 32), 0, 0),
                            philox_block(42, 1, 0), philox_block(42, 1ull << 32, 0),
                            philox_block(42, 0, 1), philox_block(42, 0, 1ull << 32)};
  for (const Philox4& o : others) {
    int same = 0;
    for (int lane = 0; lane < 4; ++lane) same += o.v[lane] == base.v[lane];
    EXPECT_EQ(same, 0);
  }
  // A pure function: the same inputs give the same words.
  const Philox4 again = philox_block(42, 0, 0);
  for (int lane = 0; lane < 4; ++lane) EXPECT_EQ(again.v[lane], base.v[lane]);
}

TEST(RngTest, UniformOpen01IsCentredInItsCell) {
  // 23 random bits k = x >> 9 give (k + 0.5) * 2^-23, exact in float for every k.
  EXPECT_EQ(uniform_open01(0u), std::ldexp(1.0f, -24));
  EXPECT_EQ(uniform_open01(0x1ffu), std::ldexp(1.0f, -24));  // low 9 bits are dropped
  EXPECT_EQ(uniform_open01(0x200u), std::ldexp(3.0f, -24));
  EXPECT_EQ(uniform_open01(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
  float previous = 0.0f;
  for (uint32_t k = 0; k < (1u << 23); ++k) {
    const float u = uniform_open01(k << 9);
    const double want = (static_cast<double>(k) + 0.5) / 8388608.0;
    ASSERT_EQ(static_cast<double>(u), want) << "k = " << k;
    ASSERT_GT(u, previous) << "not strictly increasing at k = " << k;
    previous = u;
  }
}

TEST(RngTest, UniformOpen01IsNeverZeroOrOne) {
  // Documented: "Never 0 or 1, so log() of it is finite" (and philox_uniform stays below hi).
  int64_t zeros = 0, ones = 0;
  uint32_t first_one = 0;
  for (uint32_t k = 0; k < (1u << 24); ++k) {
    const float u = uniform_open01((k << 8) | (k & 0xffu));  // every 24-bit prefix
    zeros += u <= 0.0f;
    if (u >= 1.0f && ones++ == 0) first_one = k << 8;
  }
  EXPECT_EQ(zeros, 0);
  EXPECT_EQ(ones, 0) << "uniform_open01(0x" << std::hex << first_one << ") == 1.0f: "
                     << "(k + 0.5f) needs 25 significant bits for k >= 2^23 and rounds up";
}

// ulps of the float result between portable_log(x) and log(x) computed in double.
int64_t log_ulp_error(float x) {
  const float want = static_cast<float>(std::log(static_cast<double>(x)));
  return test::ulp_distance(portable_log(x), want);
}

TEST(RngTest, PortableLogOverEveryUniformValue) {
  // Box-Muller only ever calls portable_log on uniform_open01 outputs: check all 2^23 of them.
  int64_t max_ulp = 0;
  float worst = 0.0f;
  for (uint32_t k = 0; k < (1u << 23); ++k) {
    const float x = uniform_open01(k << 9);
    const int64_t e = log_ulp_error(x);
    if (e > max_ulp) {
      max_ulp = e;
      worst = x;
    }
  }
  RecordProperty("max_ulp", static_cast<int>(max_ulp));
  std::printf("portable_log over all uniform_open01 values: max error %lld ulp (at x = %.9g)\n",
              static_cast<long long>(max_ulp), worst);
  EXPECT_LE(max_ulp, 3) << "at x = " << worst;
}

TEST(RngTest, PortableLogOverNormalFloatsInUnitInterval) {
  std::mt19937 gen(11);
  int64_t max_ulp = 0;
  float worst = 0.0f;
  for (int i = 0; i < 1000000; ++i) {
    // Random exponent from FLT_MIN up to 1, random mantissa.
    const uint32_t exp = 1 + gen() % 126;  // biased exponent 1..126: [2^-126, 1)
    const float x = bits_float((exp << 23) | (gen() & 0x7fffffu));
    const int64_t e = log_ulp_error(x);
    if (e > max_ulp) {
      max_ulp = e;
      worst = x;
    }
  }
  EXPECT_EQ(portable_log(1.0f), 0.0f);
  EXPECT_LE(log_ulp_error(0.5f), 1);
  EXPECT_LE(log_ulp_error(std::numeric_limits<float>::min()), 2);
  std::printf(
      "portable_log over random normal floats in [2^-126, 1): max error %lld ulp "
      "(at x = %.9g)\n",
      static_cast<long long>(max_ulp), worst);
  EXPECT_LE(max_ulp, 3) << "at x = " << worst;
}

::testing::AssertionResult sincos_close(float t) {
  float s, c;
  portable_sincos_turns(t, s, c);
  const double want_s = std::sin(kTwoPi * static_cast<double>(t));
  const double want_c = std::cos(kTwoPi * static_cast<double>(t));
  if (std::fabs(s - want_s) < 1e-6 && std::fabs(c - want_c) < 1e-6)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "t = " << t << ": sin " << s << " vs " << want_s << ", cos " << c << " vs " << want_c;
}

TEST(RngTest, PortableSinCosTurnsMatchesLibm) {
  // Quarter and eighth turns, and the ends of [0, 1).
  for (int j = 0; j < 8; ++j) ASSERT_TRUE(sincos_close(j / 8.0f));
  for (float t : {1e-30f, 1e-7f, 0.125f - 1e-7f, 0.125f + 1e-7f, 0.875f + 1e-7f, 0.99999994f,
                  uniform_open01(0u), uniform_open01(0xffffffffu)})
    ASSERT_TRUE(sincos_close(t));
  std::mt19937 gen(5);
  for (int i = 0; i < 1000000; ++i) ASSERT_TRUE(sincos_close(uniform_open01(gen())));
  // Exact values at the quarter turns.
  float s, c;
  portable_sincos_turns(0.0f, s, c);
  EXPECT_EQ(s, 0.0f);
  EXPECT_EQ(c, 1.0f);
  portable_sincos_turns(0.25f, s, c);
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(c, 0.0f);
}

TEST(RngTest, UniformFillLayoutIsBlockOffsetPlusIOver4) {
  // Documented layout: element i reads block offset + i/4 of stream 0, lane i % 4.
  for (uint64_t i = 0; i < 64; ++i) {
    const Philox4 r = philox_block(77, 0, 5 + i / 4);
    EXPECT_EQ(philox_uniform(77, 5, i, 0.0f, 1.0f), uniform_open01(r.v[i % 4])) << i;
  }
}

TEST(RngTest, UniformValuesStayInRange) {
  struct Range {
    float lo, hi;
  };
  for (const Range& r :
       {Range{0.0f, 1.0f}, Range{-1.0f, 1.0f}, Range{-3.0f, -2.5f}, Range{2.0f, 5.0f}}) {
    double sum = 0.0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const float v = philox_uniform(123, 0, static_cast<uint64_t>(i), r.lo, r.hi);
      ASSERT_GE(v, r.lo);
      ASSERT_LT(v, r.hi) << "element " << i << " of [" << r.lo << ", " << r.hi << ")";
      sum += v;
    }
    // Mean within 6 standard errors of (lo + hi) / 2.
    const double width = r.hi - r.lo;
    EXPECT_NEAR(sum / n, 0.5 * (r.lo + r.hi), 6.0 * width / std::sqrt(12.0 * n));
  }
}

TEST(RngTest, UniformNeverReturnsHiWhenLoIsLargeComparedToTheWidth) {
  // [1000, 1001): the ulp of 1000 is 6.1e-5, so fmaf(u, hi - lo, lo) rounds every u within half
  // an ulp of 1 up to exactly hi (probability ~3e-5 per element). The documented range is
  // [lo, hi), so hi itself must never come out.
  int64_t at_hi = 0;
  const int n = 1000000;
  for (int i = 0; i < n; ++i) {
    const float v = philox_uniform(9, 0, static_cast<uint64_t>(i), 1000.0f, 1001.0f);
    ASSERT_GE(v, 1000.0f);
    at_hi += v >= 1001.0f;
  }
  EXPECT_EQ(at_hi, 0) << at_hi << " of " << n << " values equal hi = 1001 (range is [lo, hi))";
}

TEST(RngTest, NormalMomentsAndQuantiles) {
  const int n = 1000000;
  double sum = 0.0, sum_sq = 0.0;
  int64_t below_m1 = 0, below_0 = 0, below_p1 = 0, beyond_4 = 0;
  for (int i = 0; i < n; ++i) {
    const float v = philox_normal(2024, 0, static_cast<uint64_t>(i), 0.0f, 1.0f);
    ASSERT_TRUE(std::isfinite(v)) << i;
    sum += v;
    sum_sq += static_cast<double>(v) * v;
    below_m1 += v < -1.0f;
    below_0 += v < 0.0f;
    below_p1 += v < 1.0f;
    beyond_4 += std::fabs(v) > 4.0f;
  }
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 5.0 / std::sqrt(n));
  EXPECT_NEAR(var, 1.0, 5.0 * std::sqrt(2.0 / n));
  auto expect_fraction = [n](int64_t count, double p, const char* what) {
    EXPECT_NEAR(static_cast<double>(count) / n, p, 5.0 * std::sqrt(p * (1 - p) / n)) << what;
  };
  expect_fraction(below_m1, 0.15865525393145707, "P(x < -1)");
  expect_fraction(below_0, 0.5, "P(x < 0)");
  expect_fraction(below_p1, 0.8413447460685429, "P(x < 1)");
  expect_fraction(beyond_4, 6.334248366623996e-05, "P(|x| > 4)");
}

TEST(RngTest, NormalMeanAndStdScale) {
  // N(mean, std) is mean + std * N(0, 1), element by element (one fmaf).
  for (uint64_t i = 0; i < 1000; ++i) {
    const float z = philox_normal(8, 3, i, 0.0f, 1.0f);
    EXPECT_EQ(philox_normal(8, 3, i, 3.0f, 2.0f), std::fmaf(z, 2.0f, 3.0f)) << i;
  }
  const int n = 200000;
  double sum = 0.0, sum_sq = 0.0;
  for (int i = 0; i < n; ++i) {
    const double v = philox_normal(8, 0, static_cast<uint64_t>(i), -2.0f, 0.5f);
    sum += v;
    sum_sq += v * v;
  }
  const double mean = sum / n;
  EXPECT_NEAR(mean, -2.0, 5.0 * 0.5 / std::sqrt(n));
  EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), 0.5, 0.01);
}

TEST(RngTest, NormalPairsAreUncorrelated) {
  // Box-Muller's cos and sin outputs of one pair are independent: their correlation is ~0.
  const int n = 200000;
  double sxy = 0.0;
  for (int i = 0; i < n; ++i) {
    const uint64_t base = 4 * static_cast<uint64_t>(i);
    sxy += static_cast<double>(philox_normal(1, 0, base, 0.0f, 1.0f)) *
           philox_normal(1, 0, base + 1, 0.0f, 1.0f);
  }
  EXPECT_NEAR(sxy / n, 0.0, 5.0 / std::sqrt(n));
}

TEST(RngTest, OffsetKEqualsElementsFrom4K) {
  for (uint64_t k : {1ull, 3ull, 1000ull}) {
    for (uint64_t i = 0; i < 257; ++i) {
      EXPECT_EQ(float_bits(philox_uniform(31, k, i, -1.0f, 1.0f)),
                float_bits(philox_uniform(31, 0, 4 * k + i, -1.0f, 1.0f)))
          << "k " << k << " i " << i;
      EXPECT_EQ(float_bits(philox_normal(31, k, i, 0.0f, 1.0f)),
                float_bits(philox_normal(31, 0, 4 * k + i, 0.0f, 1.0f)))
          << "k " << k << " i " << i;
    }
  }
}

TEST(RngTest, GeneratorReservesCeilNOver4Blocks) {
  Generator g(17, 10);
  EXPECT_EQ(g.seed(), 17u);
  EXPECT_EQ(g.offset(), 10u);
  Generator::Draw d = g.reserve(5);  // 2 blocks
  EXPECT_EQ(d.seed, 17u);
  EXPECT_EQ(d.offset, 10u);
  EXPECT_EQ(g.offset(), 12u);
  d = g.reserve(4);  // 1 block
  EXPECT_EQ(d.offset, 12u);
  EXPECT_EQ(g.offset(), 13u);
  d = g.reserve(1);  // 1 block
  EXPECT_EQ(d.offset, 13u);
  EXPECT_EQ(g.offset(), 14u);
  d = g.reserve(0);  // nothing
  EXPECT_EQ(d.offset, 14u);
  EXPECT_EQ(g.offset(), 14u);
  d = g.reserve(4001);  // 1001 blocks
  EXPECT_EQ(d.offset, 14u);
  EXPECT_EQ(g.offset(), 1015u);
  g.set_offset(3);
  EXPECT_EQ(g.reserve(8).offset, 3u);
  EXPECT_EQ(g.offset(), 5u);
  EXPECT_EQ(g.seed(), 17u);
  const Generator fresh;
  EXPECT_EQ(fresh.seed(), 0u);
  EXPECT_EQ(fresh.offset(), 0u);
}

}  // namespace
}  // namespace stoker::core
