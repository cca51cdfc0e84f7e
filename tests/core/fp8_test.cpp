// FP8 conversions (core/fp8.h) against their definition: every code decodes to the value the
// format defines and encodes back to itself; every float rounds to the nearest code, ties to the
// even one (checked against a search over all 256 codes on millions of floats, and at every
// midpoint); saturation instead of Inf; NaN stays NaN. Where the CUDA toolkit is built in, also
// against CUDA's own host conversion (__nv_cvt_float_to_fp8 with __NV_SATFINITE) on the same
// floats.
#include "stoker/core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#if STOKER_WITH_CUDA && __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#define STOKER_TEST_CUDA_FP8 1
#endif

namespace stoker::core {
namespace {

template <Fp8Format F>
uint8_t nearest_code(float x) {  // the definition: the closest finite code, ties to even
  if (std::isnan(x)) return 0;   // not used for NaN
  uint8_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_bits_to_float<F>(static_cast<uint8_t>(c));
    if (!std::isfinite(v)) continue;
    if (std::signbit(v) != std::signbit(x) && v != 0.0f) continue;
    const double d = std::fabs(static_cast<double>(v) - static_cast<double>(x));
    if (d < best_d || (d == best_d && (c & 1) == 0 && (best & 1) == 1)) {
      best_d = d;
      best = static_cast<uint8_t>(c);
    }
  }
  // Zero keeps the sign of x (both +0 and -0 are codes).
  if (fp8_bits_to_float<F>(best) == 0.0f) best = std::signbit(x) ? 0x80 : 0x00;
  return best;
}

template <Fp8Format F>
void check_format() {
  const float max = fp8_max(F);
  int finite = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = fp8_bits_to_float<F>(static_cast<uint8_t>(c));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(fp8_bits_to_float<F>(float_to_fp8_bits<F>(v))));
      continue;
    }
    if (std::isinf(v)) continue;  // E5M2's infinities: saturate on the way back
    ++finite;
    EXPECT_LE(std::fabs(v), max) << c;
    EXPECT_EQ(float_to_fp8_bits<F>(v), c) << "code " << c << " = " << v;
  }
  EXPECT_EQ(finite, F == Fp8Format::e4m3 ? 254 : 248);  // E4M3: 2 NaNs; E5M2: 2 Inf + 6 NaN
  // Every midpoint between neighbouring positive codes goes to the even code; just off it, to
  // the nearer one.
  for (int c = 0; c + 1 <= static_cast<int>(detail::Fp8Layout<F>::kMaxCode); ++c) {
    const float lo = fp8_bits_to_float<F>(static_cast<uint8_t>(c));
    const float hi = fp8_bits_to_float<F>(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);  // exact: the codes are a few bits wide
    EXPECT_EQ(float_to_fp8_bits<F>(mid), (c & 1) ? c + 1 : c) << "midpoint of " << c;
    EXPECT_EQ(float_to_fp8_bits<F>(std::nextafter(mid, 0.0f)), c) << c;
    EXPECT_EQ(float_to_fp8_bits<F>(std::nextafter(mid, max)), c + 1) << c;
    EXPECT_EQ(float_to_fp8_bits<F>(-mid), 0x80 | ((c & 1) ? c + 1 : c)) << c;
  }
  // Saturation, infinities, NaN.
  const uint8_t top = detail::Fp8Layout<F>::kMaxCode;
  EXPECT_EQ(float_to_fp8_bits<F>(max * 1.01f), top);
  EXPECT_EQ(float_to_fp8_bits<F>(1e30f), top);
  EXPECT_EQ(float_to_fp8_bits<F>(std::numeric_limits<float>::infinity()), top);
  EXPECT_EQ(float_to_fp8_bits<F>(-std::numeric_limits<float>::infinity()), 0x80 | top);
  EXPECT_TRUE(std::isnan(
      fp8_bits_to_float<F>(float_to_fp8_bits<F>(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(float_to_fp8_bits<F>(1e-30f), 0x00);
  EXPECT_EQ(float_to_fp8_bits<F>(-1e-30f), 0x80);
  EXPECT_EQ(float_to_fp8_bits<F>(std::numeric_limits<float>::denorm_min()), 0x00);
  // The definition on random floats over the whole range (log-uniform magnitudes, both signs).
  std::mt19937 rng(F == Fp8Format::e4m3 ? 1 : 2);
  std::uniform_real_distribution<float> lg(-22.0f, 17.0f);
  for (int i = 0; i < 200000; ++i) {
    float x = std::exp2(lg(rng));
    if (i & 1) x = -x;
    if (std::fabs(x) >= max) continue;
    ASSERT_EQ(float_to_fp8_bits<F>(x), nearest_code<F>(x)) << x;
  }
}

TEST(Fp8Test, E4M3RoundsToNearestEvenAndSaturates) {
  check_format<Fp8Format::e4m3>();
  EXPECT_EQ(float_to_fp8_bits<Fp8Format::e4m3>(1.0f), 0x38);
  EXPECT_EQ(float_to_fp8_bits<Fp8Format::e4m3>(448.0f), 0x7e);
  EXPECT_EQ(fp8_bits_to_float<Fp8Format::e4m3>(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(fp8_bits_to_float<Fp8Format::e4m3>(0x7f)));
  EXPECT_EQ(fp8_bits_to_float<Fp8Format::e4m3>(0x7e), 448.0f);
}

TEST(Fp8Test, E5M2RoundsToNearestEvenAndSaturates) {
  check_format<Fp8Format::e5m2>();
  EXPECT_EQ(float_to_fp8_bits<Fp8Format::e5m2>(1.0f), 0x3c);
  EXPECT_EQ(float_to_fp8_bits<Fp8Format::e5m2>(57344.0f), 0x7b);
  EXPECT_EQ(fp8_bits_to_float<Fp8Format::e5m2>(0x01), std::ldexp(1.0f, -16));
  EXPECT_TRUE(std::isinf(fp8_bits_to_float<Fp8Format::e5m2>(0x7c)));
  EXPECT_TRUE(std::isnan(fp8_bits_to_float<Fp8Format::e5m2>(0x7e)));
}

#ifdef STOKER_TEST_CUDA_FP8
// CUDA's own conversion (host code of cuda_fp8.h), saturating, on every float bit pattern with a
// stride (all exponents, many mantissas) and on the codes' midpoints.
TEST(Fp8Test, MatchesCudasSaturatingConversion) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) {
    const float x = bits_float(static_cast<uint32_t>(u));
    const uint8_t e4 = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
    const uint8_t e5 = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
    if (std::isnan(x)) {
      EXPECT_TRUE(
          std::isnan(fp8_bits_to_float<Fp8Format::e4m3>(float_to_fp8_bits<Fp8Format::e4m3>(x))));
      continue;
    }
    ASSERT_EQ(float_to_fp8_bits<Fp8Format::e4m3>(x), e4) << x;
    ASSERT_EQ(float_to_fp8_bits<Fp8Format::e5m2>(x), e5) << x;
  }
}
#endif

}  // namespace
}  // namespace stoker::core
