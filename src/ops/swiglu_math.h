// Private: the per-element math of ops::swiglu_forward / swiglu_backward (ops/activation.h),
// shared by the CPU reference (src/ops/cpu/swiglu.cpp) and the CUDA kernels (kernels/swiglu.cu)
// so that both give the same bits: the exponential is nn_math.h's portable_exp (no library
// transcendental) and every product goes through mul_rn or an explicit fmaf (no contraction
// that differs between nvcc and the host compiler). Roundings to the dtype are the caller's
// `round` (identity for f32).
#pragma once

#include "ops/nn_math.h"

namespace stoker::ops::detail {

// silu(g) = g / (1 + exp(-g)); exp's argument is clamped to [-80, 80] by portable_exp, where
// silu is already g (above) or a denormal-sized value of g's sign (below). NaN stays NaN.
STOKER_HD STOKER_FORCEINLINE float silu(float g) { return g / (1.0f + portable_exp(-g)); }

// silu'(g) = s (1 + g (1 - s)), s = 1 / (1 + exp(-g)), with 1 - s = exp(-g) s (no cancellation).
STOKER_HD STOKER_FORCEINLINE float silu_grad(float g) {
  const float e = portable_exp(-g);
  const float s = 1.0f / (1.0f + e);
  return mul_rn(s, fmaf(g, mul_rn(e, s), 1.0f));
}

// The forward of one element: round(round(silu(g)) * u). `Round` maps a float to its value
// after a store in the dtype.
template <typename Round>
STOKER_HD STOKER_FORCEINLINE float swiglu(float g, float u, Round round) {
  return mul_rn(round(silu(g)), u);
}

// The backward of one element: *dg = round(dy * u) * silu'(g), *du = dy * round(silu(g)) (each
// then rounded by the caller's store).
template <typename Round>
STOKER_HD STOKER_FORCEINLINE void swiglu_grad(float dy, float g, float u, Round round, float* dg,
                                              float* du) {
  *du = mul_rn(dy, round(silu(g)));
  *dg = mul_rn(round(mul_rn(dy, u)), silu_grad(g));
}

}  // namespace stoker::ops::detail
