// Host and device conversions between float and the two 8-bit float formats of FP8 training
// (the OCP FP8 formats that Hopper's tensor cores take):
//
//   E4M3  1 sign, 4 exponent (bias 7), 3 mantissa bits; largest 448, smallest subnormal 2^-9;
//         no infinities, NaN = S.1111.111 — activations and weights (more precision)
//   E5M2  1 sign, 5 exponent (bias 15), 2 mantissa bits; largest 57344, smallest subnormal
//         2^-16; IEEE-style infinities and NaNs — gradients (more range)
//
// float -> FP8 rounds to nearest, ties to even, and saturates: a finite value (or an infinity)
// beyond the largest finite magnitude becomes that magnitude, as CUDA's
// __nv_cvt_float_to_fp8(..., __NV_SATFINITE, ...) does — FP8 training scales tensors into range
// and must not turn an outlier into Inf or NaN. NaN stays NaN. The same functions run in the
// CUDA kernels (STOKER_HD), so CPU and GPU conversions give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "stoker/core/half.h"
#include "stoker/core/platform.h"

namespace stoker::core {

enum class Fp8Format : uint8_t { e4m3, e5m2 };

// The largest finite magnitude of a format.
STOKER_HD STOKER_FORCEINLINE constexpr float fp8_max(Fp8Format f) {
  return f == Fp8Format::e4m3 ? 448.0f : 57344.0f;
}

namespace detail {
template <Fp8Format F>
struct Fp8Layout;
template <>
struct Fp8Layout<Fp8Format::e4m3> {
  static constexpr int kMant = 3, kBias = 7;
  static constexpr uint32_t kMaxCode = 0x7e;  // 0.1111.110 = 448
  static constexpr uint32_t kNan = 0x7f;
};
template <>
struct Fp8Layout<Fp8Format::e5m2> {
  static constexpr int kMant = 2, kBias = 15;
  static constexpr uint32_t kMaxCode = 0x7b;  // 0.11110.11 = 57344
  static constexpr uint32_t kNan = 0x7e;      // quiet NaN
};

STOKER_HD STOKER_FORCEINLINE float round_even(float v) {  // v >= 0, exact halves tie to even
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  return std::nearbyint(v);  // the default rounding mode: to nearest, ties to even
#endif
}
}  // namespace detail

template <Fp8Format F>
STOKER_HD STOKER_FORCEINLINE uint8_t float_to_fp8_bits(float f) {
  using L = detail::Fp8Layout<F>;
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs_bits = u & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<uint8_t>(sign | L::kNan);
  const float a = bits_float(abs_bits);
  if (a >= fp8_max(F)) return static_cast<uint8_t>(sign | L::kMaxCode);  // saturate (Inf too)
  constexpr int kMinExp = 1 - L::kBias;  // exponent of the smallest normal
  int e = static_cast<int>(abs_bits >> 23) - 127;
  if (e < kMinExp) e = kMinExp;  // subnormal range (and float subnormals, far below it)
  // a / 2^(e - M): the significand in units of the last mantissa bit, exact in float (a power
  // of two scaling); rounded to an integer q. q = 2^(M+1) carries into the exponent, which the
  // code's layout does by itself: ((e + bias) << M) + (q - 2^M).
  const float q = detail::round_even(ldexpf(a, L::kMant - e));
  const uint32_t qi = static_cast<uint32_t>(q);
  uint32_t code;
  if (qi < (1u << L::kMant)) {
    code = qi;  // subnormal (or zero) at the smallest exponent
  } else {
    code = (static_cast<uint32_t>(e + L::kBias) << L::kMant) + (qi - (1u << L::kMant));
  }
  if (code > L::kMaxCode) code = L::kMaxCode;  // rounded past the largest finite value
  return static_cast<uint8_t>(sign | code);
}

template <Fp8Format F>
STOKER_HD STOKER_FORCEINLINE float fp8_bits_to_float(uint8_t c) {
  using L = detail::Fp8Layout<F>;
  const float sign = (c & 0x80u) ? -1.0f : 1.0f;
  const uint32_t exp = (c & 0x7fu) >> L::kMant;
  const uint32_t mant = c & ((1u << L::kMant) - 1u);
  if constexpr (F == Fp8Format::e4m3) {
    if ((c & 0x7fu) == 0x7fu) return bits_float(0x7fc00000u);
  } else {
    if (exp == 0x1fu) return mant == 0 ? sign * bits_float(0x7f800000u) : bits_float(0x7fc00000u);
  }
  if (exp == 0) return sign * ldexpf(static_cast<float>(mant), 1 - L::kBias - L::kMant);
  return sign * ldexpf(static_cast<float>((1u << L::kMant) + mant),
                       static_cast<int>(exp) - L::kBias - L::kMant);
}

}  // namespace stoker::core
