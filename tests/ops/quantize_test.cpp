// Block-wise 8-bit quantization (ops/quantize.h): the dynamic maps' structure, nearest-code
// encoding (the table lookup against the binary search that defines it), and the round-trip
// error bound (half the map's largest gap times the block's absmax).
#include "stoker/ops/fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/quantize_test_util.h"
#include "test_util.h"

using stoker::DType;
using stoker::Tensor;
namespace ops = stoker::ops;
using stoker::test::encoder_probes;
using stoker::test::nearest_by_search;
using stoker::test::to_bits;

namespace {

// Values whose magnitude varies over several decades inside each block (as optimizer moments
// do), plus an all-zero block and a negative-only stretch.
std::vector<float> moment_like(size_t n, uint32_t seed, bool non_negative) {
  auto u = stoker::test::random_floats(n, seed, -1.0f, 1.0f);
  auto e = stoker::test::random_floats(n, seed + 1, -6.0f, 0.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float mag = std::pow(10.0f, e[i]) * (0.5f + 0.5f * std::fabs(u[i]));
    v[i] = non_negative ? mag : (u[i] < 0 ? -mag : mag);
  }
  for (size_t i = 256; i < std::min<size_t>(n, 512); ++i) v[i] = 0.0f;  // a zero block (256)
  return v;
}

TEST(QuantizeTest, EncodeEqualsTheNearestEntrySearch) {
  for (const bool is_signed : {true, false}) {
    SCOPED_TRACE(is_signed ? "signed" : "unsigned");
    const auto& m = ops::dynamic_map(is_signed);
    const int codes = ops::dynamic_map_codes(is_signed);
    const auto probes = encoder_probes(is_signed);
    ASSERT_GT(probes.size(), size_t{1} << 22);
    int64_t mismatches = 0;
    for (const float x : probes) {
      const uint8_t want = nearest_by_search(m, codes, x);
      const uint8_t got = ops::dynamic_map_encode(x, is_signed);
      if (got != want && ++mismatches <= 10)
        ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << to_bits(x) << std::dec
                      << "): code " << int(got) << ", the search gives " << int(want);
    }
    EXPECT_EQ(mismatches, 0);
    // Spot checks of the documented ends (independent of the search above).
    EXPECT_EQ(ops::dynamic_map_encode(std::numeric_limits<float>::quiet_NaN(), is_signed), 0);
    EXPECT_EQ(ops::dynamic_map_encode(5.0f, is_signed), codes - 1);
    EXPECT_EQ(ops::dynamic_map_encode(-5.0f, is_signed), 0);
    for (int i = 0; i < codes; ++i) ASSERT_EQ(ops::dynamic_map_encode(m[i], is_signed), i);
  }
}

// quantize_blockwise's loop encodes like the search: the probes of [-1, 1] in blocks whose
// absmax is 1 (so x / absmax = x exactly).
TEST(QuantizeTest, QuantizeBlockwiseEncodesLikeTheSearch) {
  constexpr int64_t kBlock = 256;
  for (const bool is_signed : {true, false}) {
    SCOPED_TRACE(is_signed ? "signed" : "unsigned");
    const auto& m = ops::dynamic_map(is_signed);
    const int codes = ops::dynamic_map_codes(is_signed);
    const std::vector<float> v = stoker::test::probe_blocks(is_signed, kBlock);
    const int64_t n = static_cast<int64_t>(v.size());
    const Tensor x = Tensor::from_floats(v, {n});
    Tensor c = Tensor::empty({n}, DType::u8);
    Tensor absmax = Tensor::empty({ops::quantization_blocks(n, kBlock)}, DType::f32);
    ops::quantize_blockwise(c, absmax, x, is_signed, kBlock);
    const auto got = c.to_vector<uint8_t>();
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      // Unsigned maps clamp negative values to 0, which is what the search gives them.
      const uint8_t want = nearest_by_search(m, codes, v[i]);
      if (got[i] != want && ++mismatches <= 10)
        ADD_FAILURE() << "element " << i << " x = " << v[i] << ": code " << int(got[i])
                      << ", the search gives " << int(want);
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TEST(QuantizeTest, DynamicMapsFollowTheTreeConstruction) {
  for (const bool is_signed : {true, false}) {
    SCOPED_TRACE(is_signed ? "signed" : "unsigned");
    const auto& m = ops::dynamic_map(is_signed);
    const int codes = ops::dynamic_map_codes(is_signed);
    for (int i = 1; i < codes; ++i) ASSERT_LT(m[i - 1], m[i]) << "entry " << i;
    EXPECT_EQ(m[codes - 1], 1.0f);
    EXPECT_EQ(m[0], is_signed ? -1.0f : 0.0f);
    EXPECT_EQ(std::count(m.begin(), m.begin() + codes, 0.0f), 1);
    // Each decade (10^-(E+1), 10^-E] holds 2^F values, F = magnitude bits - E - 1.
    const int bits = is_signed ? 7 : 8;
    for (int e = 0; e < bits; ++e) {
      const double hi = std::pow(10.0, -e), lo = hi / 10.0;
      const auto in_decade = std::count_if(m.begin(), m.begin() + codes, [&](float x) {
        return x > 0 && x > lo * (1 + 1e-6) && x <= hi * (1 + 1e-6);
      });
      EXPECT_EQ(in_decade, 1 << (bits - e - 1)) << "decade " << e;
    }
    // Symmetric: every positive entry has its negative.
    if (is_signed)
      for (int i = 0; i < codes; ++i)
        EXPECT_NE(std::find(m.begin(), m.begin() + codes, -m[i]), m.begin() + codes) << m[i];
    // The largest gap is the top decade's step.
    EXPECT_NEAR(ops::dynamic_map_max_gap(is_signed), 0.9 / (1 << (bits - 1)), 1e-7);
  }
}

TEST(QuantizeTest, RoundTripWithinHalfTheLargestGapTimesAbsmax) {
  for (const bool is_signed : {true, false})
    for (const int64_t block : {256, 2048}) {
      SCOPED_TRACE(testing::Message() << (is_signed ? "signed" : "unsigned") << " block " << block);
      const int64_t n = 5 * block + 77;  // a short last block
      const auto v = moment_like(static_cast<size_t>(n), 7 + block, !is_signed);
      const Tensor x = Tensor::from_floats(v, {n});
      Tensor codes = Tensor::empty({n}, DType::u8);
      Tensor absmax = stoker::test::poisoned({ops::quantization_blocks(n, block)}, DType::f32);
      ops::fill(codes, 200.0);
      ops::quantize_blockwise(codes, absmax, x, is_signed, block);
      Tensor back = stoker::test::poisoned({n}, DType::f32);
      ops::dequantize_blockwise(back, codes, absmax, is_signed, block);
      const auto am = absmax.to_floats();
      const auto r = back.to_floats();
      const auto c = codes.to_vector<uint8_t>();
      const auto& map = ops::dynamic_map(is_signed);
      const int ncodes = ops::dynamic_map_codes(is_signed);
      const double half_gap = 0.5 * ops::dynamic_map_max_gap(is_signed);
      for (int64_t b = 0; b < static_cast<int64_t>(am.size()); ++b) {
        float expect = 0.0f;
        for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
          expect = std::max(expect, std::fabs(v[i]));
        ASSERT_EQ(am[b], expect) << "absmax of block " << b;
      }
      for (int64_t i = 0; i < n; ++i) {
        const double a = am[i / block];
        // f32 rounding of x / absmax and of map * absmax: a few ulp of absmax on top.
        const double bound = half_gap * a + 4 * a * 0x1p-24;
        ASSERT_LE(std::fabs(r[i] - v[i]), bound) << "element " << i << " value " << v[i];
        ASSERT_LT(c[i], ncodes) << "the padding code is never produced";
        if (a > 0) {
          // Nearest: no entry of the map is closer to x / absmax than the chosen one.
          const float q = static_cast<float>(v[i] / am[i / block]);
          const float d = std::fabs(map[c[i]] - q);
          for (int k = 0; k < ncodes; ++k) ASSERT_GE(std::fabs(map[k] - q), d) << "element " << i;
          if (std::fabs(v[i]) == a) ASSERT_EQ(r[i], v[i]) << "the absmax value is exact";
        } else {
          ASSERT_EQ(r[i], 0.0f);
        }
      }
    }
}

TEST(QuantizeTest, RejectsBadShapesAndBlocks) {
  const Tensor x = Tensor::from_floats(stoker::test::random_floats(600, 1), {600});
  Tensor codes = Tensor::empty({600}, DType::u8);
  Tensor absmax = Tensor::empty({3}, DType::f32);
  EXPECT_NO_THROW(ops::quantize_blockwise(codes, absmax, x, true, 256));
  EXPECT_THROW(ops::quantize_blockwise(codes, absmax, x, true, 300), stoker::Error);
  EXPECT_THROW(ops::quantize_blockwise(codes, Tensor::empty({2}, DType::f32), x, true, 256),
               stoker::Error);
  EXPECT_THROW(ops::quantize_blockwise(Tensor::empty({600}, DType::f32), absmax, x, true, 256),
               stoker::Error);
  try {
    ops::dequantize_blockwise(x, codes, absmax, true, 512);
    FAIL();
  } catch (const stoker::Error& e) {
    EXPECT_NE(std::string(e.what()).find("absmax must be f32 with 2 elements"), std::string::npos)
        << e.what();
  }
}

}  // namespace
