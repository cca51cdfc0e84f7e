// Small device-side pieces of a training step that must not sync the host: gradient clipping
// by a norm that stays on the device, and a loss monitor that accumulates the loss for logging
// and remembers the first non-finite step.
#pragma once

#include <cstdint>
#include <span>

#include "stoker/core/tensor.h"

namespace stoker::ops {

// xs *= min(1, max_norm / (total_norm + 1e-6)), the factor computed on the device from the
// rank-0 f32 `total_norm` (PyTorch's clip_grad_norm_). xs are f32, on total_norm's device.
void clip_by_total_norm(std::span<const Tensor> xs, const Tensor& total_norm, float max_norm);

// Dynamic loss scaling, kept entirely on the device (amp::GradScaler drives these).
//
// grads *= 1 / scale (the reciprocal taken in double, as PyTorch does) and found_inf = 1 when any
// element of any gradient is NaN or Inf. found_inf is only ever set, never cleared: zero it
// before the first call of a step. One launch for the whole list on the GPU. grads are f32.
void unscale_and_check(std::span<const Tensor> grads, const Tensor& scale, const Tensor& found_inf);

struct ScaleUpdate {
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
  int32_t hysteresis = 1;  // overflows tolerated (step skipped, scale kept) before backing off
  float min_scale = 0.0f;  // the scale never goes below; reaching it sets state[2]
};

// The scale update after a step, decided on the device from found_inf. `state` is i32[3]:
// {growth_tracker (clean steps since the last change), hysteresis_left, hit_min_scale}.
//   overflow: growth_tracker = 0; if hysteresis_left > 1 it is decremented (scale kept), else
//             scale *= backoff_factor, clamped to min_scale (then hit_min_scale = 1)
//   clean:    growth_tracker += 1; when it reaches growth_interval: scale *= growth_factor (if
//             the result is finite), growth_tracker = 0, hysteresis_left = hysteresis
void update_scale(const Tensor& scale, const Tensor& state, const Tensor& found_inf,
                  const ScaleUpdate& u);

// What the loss monitor keeps on the device (a u8 tensor of sizeof(LossMonitorState) bytes).
struct LossMonitorState {
  double loss_sum;         // finite step losses since the last reset
  int64_t steps;           // how many were summed
  float last_finite_loss;  // the most recent finite step loss
  int64_t last_finite_step;
  int64_t first_bad_step;  // first step whose loss was NaN/Inf; -1 while none
};

// A zeroed monitor (first_bad_step = -1) on `device`.
Tensor loss_monitor_create(Device device);
// Folds the rank-0 f32 `loss` of optimizer step `step` into the monitor. `step_device`
// (optional, a rank-0 i64 tensor on the monitor's device) replaces `step`: a step captured in a
// CUDA graph reads its number there, written by the host before each replay.
void loss_monitor_update(const Tensor& monitor, const Tensor& loss, int64_t step,
                         const Tensor& step_device = {});
// Reads the monitor on the host (a sync when on a GPU) and, with `reset`, zeroes the sum.
LossMonitorState loss_monitor_read(const Tensor& monitor, bool reset);

}  // namespace stoker::ops
