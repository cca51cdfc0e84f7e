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
// Folds the rank-0 f32 `loss` of optimizer step `step` into the monitor.
void loss_monitor_update(const Tensor& monitor, const Tensor& loss, int64_t step);
// Reads the monitor on the host (a sync when on a GPU) and, with `reset`, zeroes the sum.
LossMonitorState loss_monitor_read(const Tensor& monitor, bool reset);

}  // namespace stoker::ops
