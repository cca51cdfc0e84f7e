// Host and device conversions between float and the two 16-bit float formats.
//
// Both directions round to nearest, ties to even, and keep NaN (quiet) and +-Inf, so the CPU
// reference produces exactly the bits the GPU kernels produce. The same functions are used by the
// CUDA kernels (STOKER_HD), which is what makes CPU-vs-GPU casts bit-identical.
#pragma once

#include <cstdint>
#include <cstring>

#include "stoker/core/platform.h"

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
