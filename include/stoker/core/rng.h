// Counter-based random numbers: Philox-4x32-10 (Salmon et al., SC'11, "Random123"). A draw is a
// pure function of (seed, stream id, counter), with the same bits on CPU and GPU (normals use a
// portable log/sin/cos built only from IEEE-exact add, mul, fmaf, sqrtf and division).
// Element i of a fill with (seed, offset) reads block `offset + i / 4` of stream 0 and takes lane
// `i % 4` (uniform) or the Box-Muller pair of that lane (normal).
// Details: docs/architecture.md#tensors-and-memory.
#pragma once

#include <cmath>
#include <cstdint>

#include "stoker/core/half.h"

namespace stoker::core {

struct Philox4 {
  uint32_t v[4];
};

STOKER_HD STOKER_FORCEINLINE void mul_hi_lo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// The raw generator: 10 rounds of Philox-4x32 on counter `c` with key `k`.
STOKER_HD inline Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mul_hi_lo(kM0, c.v[0], hi0, lo0);
    mul_hi_lo(kM1, c.v[2], hi1, lo1);
    c = Philox4{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += kW0;
    k1 += kW1;
  }
  return c;
}

// Four random 32-bit words for (seed, stream, block).
STOKER_HD STOKER_FORCEINLINE Philox4 philox_block(uint64_t seed, uint64_t stream, uint64_t block) {
  return philox4x32_10(
      Philox4{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}},
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// Uniform in the open interval (0, 1): 23 random bits, centred in their cell of width 2^-23:
// (k + 1/2) * 2^-23 for k < 2^23 is exact in float, so the result lies in [2^-24, 1 - 2^-24]
// and is never 0 or 1 (log() of it is finite).
STOKER_HD STOKER_FORCEINLINE float uniform_open01(uint32_t x) {
  return fmaf(static_cast<float>(x >> 9), 1.1920928955078125e-7f, 5.9604644775390625e-8f);
}

// Portable natural log for normal floats x in (0, 1] (uniform_open01's range; subnormals are
// not handled): exponent split, then log(m) = 2 atanh((m-1)/(m+1)) as an odd polynomial. At
// most 3 ulp (measured over every uniform_open01 value); identical bits on CPU and GPU.
// Why not the more accurate f - hfsq + s (hfsq + R) form: its product-plus-sum is contracted to
// an FMA by nvcc (not by the host compiler), which breaks the bit-identity; every product here
// is either rounded on its own into a call argument or consumed by an explicit fmaf.
STOKER_HD inline float portable_log(float x) {
  uint32_t u = float_bits(x);
  int e = static_cast<int>((u >> 23) & 0xff) - 127;
  u = (u & 0x007fffffu) | 0x3f800000u;  // m in [1, 2)
  float m = bits_float(u);
  if (m > 1.41421356f) {  // move m into [sqrt(1/2), sqrt(2)) so s stays small
    m *= 0.5f;
    e += 1;
  }
  const float s = (m - 1.0f) / (m + 1.0f);
  const float s2 = s * s;
  float p = 0.11111111f;         // 1/9
  p = fmaf(p, s2, 0.14285715f);  // 1/7
  p = fmaf(p, s2, 0.2f);         // 1/5
  p = fmaf(p, s2, 0.33333334f);  // 1/3
  p = fmaf(p, s2, 1.0f);
  const float log_m = 2.0f * s * p;
  const float fe = static_cast<float>(e);
  return fmaf(fe, 0.693145752f, fmaf(fe, 1.42860677e-06f, log_m));  // ln2 split hi + lo
}

// sin and cos of 2*pi*t for t in [0, 1): reduce to an eighth of a turn exactly (t*4 and the
// subtraction are exact for t in [0,1)), then Taylor polynomials on [-pi/4, pi/4].
STOKER_HD inline void portable_sincos_turns(float t, float& s, float& c) {
  const float q = floorf(fmaf(t, 4.0f, 0.5f));  // nearest quarter turn
  const float r = fmaf(q, -0.25f, t);           // in [-1/8, 1/8], exact
  const float x = r * 6.28318548f;              // angle in [-pi/4, pi/4]
  const float x2 = x * x;
  float ps = -2.50521084e-08f;
  ps = fmaf(ps, x2, 2.75573192e-06f);
  ps = fmaf(ps, x2, -1.98412698e-04f);
  ps = fmaf(ps, x2, 8.33333333e-03f);
  ps = fmaf(ps, x2, -1.66666667e-01f);
  const float sin_x = fmaf(x * x2, ps, x);
  float pc = 2.08767570e-09f;
  pc = fmaf(pc, x2, -2.75573192e-07f);
  pc = fmaf(pc, x2, 2.48015873e-05f);
  pc = fmaf(pc, x2, -1.38888889e-03f);
  pc = fmaf(pc, x2, 4.16666667e-02f);
  pc = fmaf(pc, x2, -0.5f);
  const float cos_x = fmaf(x2, pc, 1.0f);
  switch (static_cast<int>(q) & 3) {
    case 0:
      s = sin_x;
      c = cos_x;
      break;
    case 1:
      s = cos_x;
      c = -sin_x;
      break;
    case 2:
      s = -sin_x;
      c = -cos_x;
      break;
    default:
      s = -cos_x;
      c = sin_x;
      break;
  }
}

// Element i of a uniform fill in [lo, hi). The rounding of lo + u (hi - lo) can reach hi when
// |lo| is large next to the width: such values step down to the float below hi.
STOKER_HD inline float philox_uniform(uint64_t seed, uint64_t offset, uint64_t i, float lo,
                                      float hi) {
  const Philox4 r = philox_block(seed, 0, offset + i / 4);
  const float v = fmaf(uniform_open01(r.v[i % 4]), hi - lo, lo);
  return v < hi ? v : (lo < hi ? nextafterf(hi, lo) : lo);
}

// Element i of a normal fill N(mean, std^2): Box-Muller on the lane pair of its block.
STOKER_HD inline float philox_normal(uint64_t seed, uint64_t offset, uint64_t i, float mean,
                                     float std) {
  const Philox4 r = philox_block(seed, 0, offset + i / 4);
  const unsigned pair = static_cast<unsigned>(i % 4) & 2u;
  const float u1 = uniform_open01(r.v[pair]);
  const float u2 = uniform_open01(r.v[pair + 1]);
  const float radius = sqrtf(-2.0f * portable_log(u1));
  float s, c;
  portable_sincos_turns(u2, s, c);
  return fmaf(radius * ((i % 2) ? s : c), std, mean);
}

// Hands out non-overlapping Philox ranges from one seed: each draw of n elements reserves
// ceil(n/4) blocks. Saving (seed, offset) and restoring it replays every later draw.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  struct Draw {
    uint64_t seed;
    uint64_t offset;
  };
  Draw reserve(uint64_t elements) {
    const Draw d{seed_, offset_};
    offset_ += (elements + 3) / 4;
    return d;
  }
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_offset(uint64_t offset) { offset_ = offset; }

 private:
  uint64_t seed_;
  uint64_t offset_;
};

}  // namespace stoker::core

namespace stoker {
using core::Generator;
}  // namespace stoker
