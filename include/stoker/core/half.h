// Host and device conversions between float and the two 16-bit float formats.
//
// Both directions round to nearest, ties to even, and keep NaN (quiet) and +-Inf, so the CPU
// reference produces exactly the bits the GPU kernels produce. The same functions are used by the
// CUDA kernels (STOKER_HD), which is what makes CPU-vs-GPU casts bit-identical.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

// Macros shared by host and device code. STOKER_HD marks functions that must compute the same
#if defined(__CUDACC__)
#define STOKER_HD __host__ __device__
#define STOKER_FORCEINLINE __forceinline__
#else
#define STOKER_HD
#define STOKER_FORCEINLINE inline __attribute__((always_inline))
#endif

namespace stoker::core {

STOKER_HD STOKER_FORCEINLINE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

STOKER_HD STOKER_FORCEINLINE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// bf16 is the upper half of a float: round the lower 16 bits away (RNE), NaN stays NaN.
STOKER_HD STOKER_FORCEINLINE uint16_t float_to_bf16_bits(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

STOKER_HD STOKER_FORCEINLINE float bf16_bits_to_float(uint16_t h) {
  return bits_float(static_cast<uint32_t>(h) << 16);
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
STOKER_HD STOKER_FORCEINLINE uint16_t float_to_half_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x1ffu));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value = m * 2^-24 with m rounded to an integer.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to zero
    const uint32_t exp = abs >> 23;                             // 102..112
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;        // 24 significant bits
    const uint32_t shift = 126u - exp;                          // 14..24
    uint32_t m = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);
  }
  // Normal: rebias exponent 127 -> 15 and round 23 -> 10 mantissa bits; rounding up into the
  // exponent is the correct result (it may become Inf only above the threshold handled above).
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

STOKER_HD STOKER_FORCEINLINE float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp == 0) {
    // Subnormal or zero: mant * 2^-24, exact in float.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Storage types with the bit layout of CUDA's __half / __nv_bfloat16.
struct Half {
  uint16_t bits;
  Half() = default;
  STOKER_HD explicit Half(float f) : bits(float_to_half_bits(f)) {}
  STOKER_HD explicit operator float() const { return half_bits_to_float(bits); }
  STOKER_HD static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  STOKER_HD explicit BFloat16(float f) : bits(float_to_bf16_bits(f)) {}
  STOKER_HD explicit operator float() const { return bf16_bits_to_float(bits); }
  STOKER_HD static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

}  // namespace stoker::core

// Host and device conversions between float and the two 8-bit float formats of FP8 training (the
// OCP FP8 formats that Hopper's tensor cores take):
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
