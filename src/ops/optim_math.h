// Private: the per-element optimizer updates, shared by the CPU loops and the CUDA kernels so
// both backends run the same arithmetic. Every multiply-add is an explicit fmaf and the CUDA
// file is compiled with -fmad=false, so no compiler contracts differently on either side and the
// updates are bit-identical. Host-side constants (decay, step size, bias corrections) are
// computed once per step in double, as PyTorch computes its Python-float scalars.
#pragma once

#include <cmath>
#include <cstdint>

#include "stoker/core/half.h"
#include "stoker/ops/optim.h"

namespace stoker::ops::detail {

struct SgdConsts {
  float lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov, first_step, has_momentum;
};

// One SGD element: p, buf updated in place; g is the raw gradient.
STOKER_HD STOKER_FORCEINLINE void sgd_update(float& p, float& buf, float g, const SgdConsts& c) {
  if (c.weight_decay != 0.0f) g = fmaf(c.weight_decay, p, g);
  if (c.has_momentum) {
    buf = c.first_step ? g : fmaf(c.momentum, buf, c.one_minus_dampening * g);
    g = c.nesterov ? fmaf(c.momentum, buf, g) : buf;
  }
  p = fmaf(-c.lr, g, p);
}

// LARS (ops::lars_step). The trust ratio of an adapted tensor from its two norms, in f32 on
// both backends; `1` where either norm is zero (or NaN: an overflowed step, skipped anyway).
struct LarsConsts {
  float lr, momentum, weight_decay, eta, epsilon;
};

STOKER_HD STOKER_FORCEINLINE float lars_trust(float w_norm, float g_norm, const LarsConsts& c) {
  if (!(w_norm > 0.0f) || !(g_norm > 0.0f)) return 1.0f;
  return c.eta * w_norm / (fmaf(c.weight_decay, w_norm, g_norm) + c.epsilon);
}

// One LARS element: `lr` is this tensor's rate (lr * trust, or lr for an excluded tensor) and
// `weight_decay` its decay (0 for an excluded tensor).
STOKER_HD STOKER_FORCEINLINE void lars_update(float& p, float& buf, float g, float lr,
                                              float weight_decay, float momentum) {
  if (weight_decay != 0.0f) g = fmaf(weight_decay, p, g);
  buf = fmaf(momentum, buf, lr * g);
  p -= buf;
}

struct AdamWConsts {
  float decay;            // 1 - lr * weight_decay
  float one_minus_beta1;  // lerp weight of the first moment
  float beta2, one_minus_beta2;
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float eps;
};

STOKER_HD STOKER_FORCEINLINE void adamw_update(float& p, float& m, float& v, float g,
                                               const AdamWConsts& c) {
  p = p * c.decay;
  m = fmaf(c.one_minus_beta1, g - m, m);            // lerp(m, g, 1 - beta1)
  v = fmaf(c.one_minus_beta2 * g, g, v * c.beta2);  // beta2 v + (1 - beta2) g^2
  const float denom = sqrtf(v) / c.bc2_sqrt + c.eps;
  p = fmaf(-c.step_size, m / denom, p);
}

// AdamW's step counter and bias corrections kept on the device (ops::AdamWStepState): advanced
// only by steps that were not skipped for overflow, so a skipped step does not count, as in
// PyTorch. beta^t by repeated multiplication in double: the same operations on both backends.
// 1 - lr * weight_decay, in double, rounded once (the host's adamw_consts and the device-lr
// path alike).
STOKER_HD STOKER_FORCEINLINE float adamw_decay(double lr, double weight_decay) {
  return static_cast<float>(1.0 - lr * weight_decay);
}

STOKER_HD STOKER_FORCEINLINE void adamw_advance(AdamWStepState& s, bool skip, double beta1,
                                                double beta2, double lr) {
  if (skip) return;
  s.step += 1;
  s.beta1_pow *= beta1;
  s.beta2_pow *= beta2;
  s.step_size = static_cast<float>(lr / (1.0 - s.beta1_pow));
  s.bc2_sqrt = static_cast<float>(sqrt(1.0 - s.beta2_pow));
}

}  // namespace stoker::ops::detail
