// Private: per-element quantization arithmetic shared by the CPU loops and the CUDA kernels
// (ops/quantize.h, the low-precision optimizer states of ops/optim.h). Only operations that
// IEEE-754 rounds identically everywhere (compare, subtract, divide, multiply, integer ops), so
// the CPU and the GPU produce the same codes and the same bf16 bits.
#pragma once

#include <cstdint>

#include "stoker/core/half.h"
#include "stoker/core/platform.h"
#include "stoker/core/rng.h"

namespace stoker::ops::detail {

// How one optimizer state tensor is stored (ops::StateTensor, by the dtype of its values).
enum StateForm : uint8_t { kStateF32 = 0, kStateBF16 = 1, kStateQ8 = 2 };

// Index of the entry of the sorted `map` (first `codes` entries) nearest to x; ties go to the
// lower entry. Values beyond either end take the end's code; NaN takes code 0 (only reachable
// when the state is already NaN, and then the parameter is NaN too).
STOKER_HD STOKER_FORCEINLINE uint8_t quantize_nearest(const float* map, int codes, float x) {
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

// x / absmax, or 0 for an all-zero block.
STOKER_HD STOKER_FORCEINLINE float normalize_by(float x, float absmax) {
  return absmax > 0.0f ? x / absmax : 0.0f;
}

// bf16 with stochastic rounding: r16 (16 random bits) added below the kept bits, then
// truncated, so x rounds up with probability (its distance to the lower bf16) / (the gap):
// unbiased in expectation. NaN and Inf round to nearest (no random carry into them).
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
