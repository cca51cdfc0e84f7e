// Private: the host-side part of a CPU optimizer step, the same for the f32-state updates
// (ops/cpu/optim.cpp) and the compact-state ones (ops/cpu/optim_state.cpp).
#pragma once

#include "ops/optim_math.h"
#include "stoker/core/tensor.h"

namespace stoker::ops::cpu {

// Whether found_inf (a one-element f32 flag, or undefined) skips this step. It is read on the
// host: on the CPU that is free.
inline bool skip_step(const Tensor& found_inf) {
  return found_inf.defined() && *static_cast<const float*>(found_inf.data()) != 0.0f;
}

// A device learning rate (a rank-0 f32 tensor, ops/optim.h): on the CPU, read where it lies.
inline float device_lr(const Tensor& lr) { return *static_cast<const float*>(lr.data()); }

// This AdamW step's constants: host_consts, with the step size and bias correction taken from
// the step state when there is one, after advancing it (a skipped step leaves it as it was).
inline detail::AdamWConsts adamw_step_consts(const detail::AdamWConsts& host_consts,
                                             const Tensor& step_state, bool skip, double beta1,
                                             double beta2, double lr) {
  detail::AdamWConsts c = host_consts;
  if (step_state.defined()) {
    auto* st = static_cast<AdamWStepState*>(step_state.data());
    detail::adamw_advance(*st, skip, beta1, beta2, lr);
    c.step_size = st->step_size;
    c.bc2_sqrt = st->bc2_sqrt;
  }
  return c;
}

}  // namespace stoker::ops::cpu
