// Private: the per-element math of the activation, dropout and MSE ops, shared by the CPU
// reference (src/ops/cpu/) and the CUDA kernels (kernels/) so that both produce the same bits.
//
// The invariant is bit-equality. Two things would break it and are avoided here:
// - library transcendentals: glibc's tanhf/expf and CUDA's differ in the last bit, so GELU uses
//   `portable_exp` below, written only with operations IEEE-754 rounds identically everywhere
//   (fmaf, add, sub, div, floorf, bit moves);
// - implicit FMA contraction: nvcc fuses `a * b + c` into one fmaf by default (the host
//   compiler, in ISO C++ mode on x86-64, does not), so every product that feeds a sum goes
//   through `mul_rn`, which nvcc never fuses, and every wanted fusion is an explicit fmaf.
//
// GELU is evaluated as x * sigmoid(2u) = x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// which equals PyTorch's 0.5 x (1 + tanh(u)) but stays relatively accurate where 1 + tanh(u)
// cancels (large negative x), and its derivative uses 1 - s = e * s without cancellation.
#pragma once

#include <cmath>
#include <cstdint>

#include "stoker/core/half.h"
#include "stoker/core/rng.h"

namespace stoker::ops::detail {

// a * b, rounded once and never fused into a following add (device: __fmul_rn).
STOKER_HD STOKER_FORCEINLINE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// max(x, 0) that keeps NaN (as PyTorch's relu), so an overflow upstream stays visible.
STOKER_HD STOKER_FORCEINLINE float relu(float x) { return x <= 0.0f ? 0.0f : x; }
// dy where the forward's output y is positive (or NaN), else 0.
STOKER_HD STOKER_FORCEINLINE float relu_grad(float dy, float y) { return y <= 0.0f ? 0.0f : dy; }

// exp(v) for any float v, about 2 ulp, identical bits on CPU and GPU. The argument is clamped
// to [-80, 80] (exp(-80) + 1 == 1 in fp32 and exp(80) is finite), which is all the sigmoid needs.
STOKER_HD inline float portable_exp(float v) {
  v = fminf(fmaxf(v, -80.0f), 80.0f);                  // NaN becomes -80: callers keep x
  const float k = floorf(fmaf(v, 1.44269504f, 0.5f));  // nearest power of two
  float r = fmaf(k, -0.693145752f, v);                 // v - k ln2, Cody-Waite split:
  r = fmaf(k, -1.42860677e-06f, r);                    // |r| <= ~0.347
  float p = 1.98412698e-04f;                           // 1/7!, Taylor to degree 7
  p = fmaf(p, r, 1.38888889e-03f);
  p = fmaf(p, r, 8.33333333e-03f);
  p = fmaf(p, r, 4.16666667e-02f);
  p = fmaf(p, r, 1.66666667e-01f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const int ki = static_cast<int>(k);  // in [-116, 116]: 2^k is normal
  return mul_rn(p, core::bits_float(static_cast<uint32_t>(ki + 127) << 23));
}

constexpr float kGeluSqrt2OverPi = 0.797884561f;
constexpr float kGeluCoeff = 0.044715f;
constexpr float kGeluCoeff3 = 0.134145f;  // 3 * kGeluCoeff

// y = gelu(x), tanh form.
STOKER_HD STOKER_FORCEINLINE float gelu(float x) {
  const float x3 = mul_rn(mul_rn(x, x), x);
  const float u = mul_rn(kGeluSqrt2OverPi, fmaf(kGeluCoeff, x3, x));
  const float e = portable_exp(-2.0f * u);  // 2u is exact
  return x / (1.0f + e);
}

// d gelu(x) / dx = s + 2 x s (1 - s) u'(x), s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3 c x^2).
STOKER_HD STOKER_FORCEINLINE float gelu_grad(float x) {
  const float x2 = mul_rn(x, x);
  const float x3 = mul_rn(x2, x);
  const float u = mul_rn(kGeluSqrt2OverPi, fmaf(kGeluCoeff, x3, x));
  const float e = portable_exp(-2.0f * u);
  const float s = 1.0f / (1.0f + e);
  const float one_minus_s = mul_rn(e, s);
  const float du = mul_rn(kGeluSqrt2OverPi, fmaf(kGeluCoeff3, x2, 1.0f));
  const float t = mul_rn(mul_rn(2.0f * x, s), one_minus_s);
  return fmaf(t, du, s);
}

// Dropout keeps element i when philox_uniform(seed, offset, i, 0, 1) >= p. Four consecutive
// elements 4g..4g+3 share Philox block offset + g (core/rng.h), so one block serves all four;
// the comparison value is exactly philox_uniform's (fmaf(u, 1 - 0, 0) == u).
struct KeepMask4 {
  bool keep[4];
};

STOKER_HD STOKER_FORCEINLINE KeepMask4 dropout_keep4(uint64_t seed, uint64_t offset, uint64_t group,
                                                     float p) {
  const core::Philox4 r = core::philox_block(seed, 0, offset + group);
  KeepMask4 m;
  for (int k = 0; k < 4; ++k) m.keep[k] = !(fmaf(core::uniform_open01(r.v[k]), 1.0f, 0.0f) < p);
  return m;
}

// Inverted-dropout scale for kept elements, computed once on the host by both backends.
inline float dropout_scale(float p) { return 1.0f / (1.0f - p); }

// dpred = k * (pred - target) with k = 2 * scale / numel, computed once on the host by both
// backends (in double, rounded once), so the elementwise products agree to the bit.
inline float mse_grad_factor(float scale, int64_t numel) {
  return static_cast<float>(2.0 * static_cast<double>(scale) / static_cast<double>(numel));
}
STOKER_HD STOKER_FORCEINLINE float mse_grad(float pred, float target, float k) {
  return mul_rn(k, pred - target);
}

}  // namespace stoker::ops::detail
