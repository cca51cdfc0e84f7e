// Private: per-element quantization arithmetic shared by the CPU loops and the CUDA kernels
// (ops/quantize.h, the low-precision optimizer states of ops/optim.h). Only operations that
// IEEE-754 rounds identically everywhere (compare, subtract, divide, multiply, integer ops), so
// the CPU and the GPU produce the same codes and the same bf16 bits.
#pragma once

#include <cstdint>

#include "stoker/core/half.h"
#include "stoker/core/rng.h"

namespace stoker::ops::detail {

// How one optimizer state tensor is stored (ops::StateTensor, by the dtype of its values).
enum StateForm : uint8_t { kStateF32 = 0, kStateBF16 = 1, kStateQ8 = 2 };

// Encoding a normalized value (x / absmax) into its code: the index of the entry of the sorted
// map nearest to x, ties to the lower entry (the nearest entry's distance computed in f32, as
// `map[hi] - x < x - map[lo]`); values beyond either end take the end's code; NaN takes code 0
// (only reachable when the state is already NaN, and then the parameter is NaN too).
//
// Why a table and not a search: a binary search costs 8 dependent loads per value and state,
// which made the 8-bit optimizer kernel compute-bound. The code is a non-decreasing function of
// x, so it equals the number of thresholds `above[j]` (j = 0 .. codes - 2; the largest float
// whose code is j) that x exceeds. A bucket of x's float bits (sign, exponent, top
// kEncodeMantissaBits of the mantissa) gives the code of the bucket's lowest value, `first`;
// at most kEncodeSteps thresholds fall inside a bucket, so kEncodeSteps independent compares
// against `above` finish the count. The host builds both arrays from the binary search
// (ops/quantize.cpp, which checks the step bound), and the CPU loops and the kernels all call
// encode_nearest on the same table: identical codes everywhere, and the same codes as the
// search (tests/ops/quantize_test.cpp compares them on every map entry, every midpoint and
// their float neighbours, and a fine grid over [-2, 2]).
constexpr int kEncodeMantissaBits = 6;
constexpr int kEncodeSteps = 2;
constexpr int kEncodeShift = 23 - kEncodeMantissaBits;
constexpr uint32_t kEncodeLowKey = 0x33800000u >> kEncodeShift;  // 2^-24 and below: bucket 0
constexpr uint32_t kEncodeOneKey = 0x3f800000u >> kEncodeShift;  // 1.0 and above: last bucket
constexpr int kEncodeBuckets = static_cast<int>(kEncodeOneKey - kEncodeLowKey) + 1;  // per sign

struct alignas(16) EncodeTable {  // 16-byte aligned: kernels copy it in 16-byte words
  // above[j]: the largest float encoded as j or lower; +Inf from codes - 1 on (never exceeded).
  float above[256 + kEncodeSteps];
  // first[b]: the code of the lowest value of bucket b (positive x: b = magnitude bucket;
  // negative x: kEncodeBuckets + magnitude bucket).
  uint8_t first[2 * kEncodeBuckets];
};

// The bucket of x (see EncodeTable::first).
STOKER_HD STOKER_FORCEINLINE int encode_bucket(float x) {
  const uint32_t u = core::float_bits(x);
  const uint32_t key = (u & 0x7fffffffu) >> kEncodeShift;
  const uint32_t mag = key <= kEncodeLowKey   ? 0u
                       : key >= kEncodeOneKey ? static_cast<uint32_t>(kEncodeBuckets - 1)
                                              : key - kEncodeLowKey;
  return static_cast<int>((u >> 31) * static_cast<uint32_t>(kEncodeBuckets) + mag);
}

// The code of x under the map `t` was built from (see above).
STOKER_HD STOKER_FORCEINLINE uint8_t encode_nearest(const EncodeTable& t, float x) {
  const int c = t.first[encode_bucket(x)];
  static_assert(kEncodeSteps == 2, "encode_nearest compares kEncodeSteps thresholds");
  const int code = c + (x > t.above[c] ? 1 : 0) + (x > t.above[c + 1] ? 1 : 0);
  return x == x ? static_cast<uint8_t>(code) : uint8_t{0};
}

// The encode table of dynamic_map(is_signed) (ops/quantize.h), built once (host memory).
const EncodeTable& encode_table(bool is_signed);

// x / absmax, or 0 for an all-zero block.
STOKER_HD STOKER_FORCEINLINE float normalize_by(float x, float absmax) {
  return absmax > 0.0f ? x / absmax : 0.0f;
}

// bf16 with stochastic rounding: r16 (16 random bits) added below the kept bits, then
// truncated, so x rounds up with probability (its distance to the lower bf16) / (the gap):
// unbiased in expectation. NaN and Inf round to nearest (no random bits added to them).
STOKER_HD STOKER_FORCEINLINE uint16_t float_to_bf16_stochastic(float x, uint32_t r16) {
  const uint32_t u = core::float_bits(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return core::float_to_bf16_bits(x);
  return static_cast<uint16_t>((u + (r16 & 0xffffu)) >> 16);
}

// The Philox stream of the optimizer's stochastic rounding (distinct from stream 0 of the
// random fills, so a shared seed does not correlate them).
constexpr uint64_t kStateRoundingStream = 0x5747e;  // "state"

// 32 random bits for element `gi` (index over the whole multi-tensor list) of a step whose draws
// start at Philox block `offset`: block offset + gi / 4, lane gi % 4. State 0 rounds with the
// low 16 bits, state 1 with the high 16.
STOKER_HD STOKER_FORCEINLINE uint32_t state_rounding_bits(uint64_t seed, uint64_t offset,
                                                          uint64_t gi) {
  return core::philox_block(seed, kStateRoundingStream, offset + gi / 4).v[gi % 4];
}

}  // namespace stoker::ops::detail
