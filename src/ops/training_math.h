// Private: the arithmetic of the training-step ops (ops/training.h) that runs on one thread,
// shared by the CPU (src/ops/cpu/training.cpp) and the single-thread CUDA kernels
// (kernels/training.cu) so that both give the same bits. No library calls: finiteness is
// `x - x == 0`, which IEEE-754 answers alike everywhere (kernels/training.cu is compiled with
// -fmad=false, so nothing is contracted differently either).
#pragma once

#include <cstdint>

#include "stoker/core/half.h"
#include "stoker/ops/optim.h"

namespace stoker::ops::detail {

// The scale update of ops::update_scale (see training.h); state = {tracker, hysteresis_left,
// hit_min_scale}.
STOKER_HD STOKER_FORCEINLINE void scale_update(float& scale, int32_t* state, bool found_inf,
                                               float growth, float backoff, int64_t interval,
                                               int32_t hysteresis, float min_scale) {
  if (found_inf) {
    state[0] = 0;
    if (state[1] > 1) {
      state[1] -= 1;
      return;
    }
    float s = scale * backoff;
    if (s <= min_scale) {
      s = min_scale;
      state[2] = 1;
    }
    scale = s;
    return;
  }
  const int32_t t = state[0] + 1;
  if (t >= interval) {
    const float grown = scale * growth;
    if (grown - grown == 0.0f) scale = grown;  // finite
    state[0] = 0;
    state[1] = hysteresis;
  } else {
    state[0] = t;
  }
}

// Folds optimizer step `step`'s loss `l` into the loss monitor (ops::loss_monitor_update).
STOKER_HD STOKER_FORCEINLINE void loss_monitor_fold(LossMonitorState& s, float l, int64_t step) {
  if (l - l == 0.0f) {  // finite
    s.loss_sum += l;
    s.steps += 1;
    s.last_finite_loss = l;
    s.last_finite_step = step;
  } else if (s.first_bad_step < 0) {
    s.first_bad_step = step;
  }
}

}  // namespace stoker::ops::detail
