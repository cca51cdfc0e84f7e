// Test helpers of block-wise quantization (tests/ops/quantize_test.cpp and
// quantize_gpu_test.cpp): the binary search that defines a value's code (the library's encoder
// before its lookup table, kept here as the reference) and the probe values where an encoder
// could go wrong.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "stoker/ops/fp8.h"

namespace stoker::test {

// The definition of a code (the binary search the library used before its lookup table): the
// entry nearest to x, the distances computed in f32, ties to the lower entry; beyond either end
// the end's code; NaN code 0.
inline uint8_t nearest_by_search(const std::array<float, 256>& map, int codes, float x) {
  if (!(x > map[0])) return 0;
  if (x >= map[codes - 1]) return static_cast<uint8_t>(codes - 1);
  int lo = 0, hi = codes - 1;  // map[lo] <= x < map[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) >> 1;
    if (map[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  return static_cast<uint8_t>(map[hi] - x < x - map[lo] ? hi : lo);
}

inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// x and its `ulps` float neighbours on each side.
inline void add_with_neighbours(std::vector<float>& out, float x, int ulps) {
  out.push_back(x);
  float up = x, down = x;
  for (int i = 0; i < ulps; ++i) {
    up = std::nextafter(up, std::numeric_limits<float>::infinity());
    down = std::nextafter(down, -std::numeric_limits<float>::infinity());
    out.push_back(up);
    out.push_back(down);
  }
}

// The values where an encoder could go wrong: every map entry, every midpoint between
// neighbours (in f32 and in double) with 16 floats either side, both boundaries of every
// power-of-two-and-64th interval of magnitudes in [2^-26, 2] with both signs (where a table
// over exponent and top mantissa bits switches buckets), the ends, zeros, denormals, infinities
// and NaNs, and every float of [-2, 2] whose bits step by a stride (one float in 2^9).
inline std::vector<float> encoder_probes(bool is_signed) {
  const auto& m = stoker::ops::dynamic_map(is_signed);
  const int codes = stoker::ops::dynamic_map_codes(is_signed);
  std::vector<float> v;
  for (int i = 0; i < codes; ++i) add_with_neighbours(v, m[i], 4);
  for (int i = 0; i + 1 < codes; ++i) {
    add_with_neighbours(v, (m[i] + m[i + 1]) / 2.0f, 16);
    add_with_neighbours(v, static_cast<float>((double(m[i]) + double(m[i + 1])) / 2.0), 16);
  }
  for (uint32_t u = to_bits(0x1p-26f); u <= to_bits(2.0f); u += 1u << 17)
    for (const uint32_t b : {u, u - 1, u + 1})
      for (const uint32_t sign : {0u, 0x80000000u}) v.push_back(from_bits(b | sign));
  for (const float x :
       {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, std::numeric_limits<float>::max(),
        -std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
        -std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
        -std::numeric_limits<float>::denorm_min(), 1e-40f, -1e-40f})
    add_with_neighbours(v, x, 2);
  for (const float x :
       {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
        from_bits(0x7f800001u), from_bits(0xffbfffffu)})
    v.push_back(x);
  // Every 2^9-th float of [-2, 2]: 2^31 floats / 2^9 = 2^22 probes, low bits varied by the
  // odd stride.
  constexpr uint32_t kStride = (1u << 9) + 1;
  for (uint32_t u = 0; u <= to_bits(2.0f); u += kStride) {
    v.push_back(from_bits(u));
    v.push_back(from_bits(u | 0x80000000u));
  }
  return v;
}

// The probes of (-1, 1) laid out in blocks of `block` values that each start with 1.0, so that
// every block's absmax is 1 and quantization encodes x / absmax = x exactly.
inline std::vector<float> probe_blocks(bool is_signed, int64_t block) {
  std::vector<float> v;
  for (const float x : encoder_probes(is_signed)) {
    if (!(std::fabs(x) < 1.0f)) continue;  // NaN and the ends
    if (static_cast<int64_t>(v.size()) % block == 0) v.push_back(1.0f);
    v.push_back(x);
  }
  return v;
}

}  // namespace stoker::test
