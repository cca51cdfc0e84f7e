// GradScaler: dynamic loss scaling for fp16 training with all of its state on the device.
//
// PyTorch's torch.amp.GradScaler semantics and defaults (init 2^16, x2 after 2000 clean steps,
// x0.5 on an overflow, unscale before clipping, the step skipped on overflow), plus DeepSpeed's
// optional hysteresis and a minimum scale. Unlike PyTorch's `scaler.step()`, nothing here reads a
// value on the host: the scale, the growth tracker and found_inf live on the device; one
// multi-tensor kernel unscales and checks every gradient; the optimizer reads found_inf on the
// device (Optimizer::set_found_inf) and leaves weights and state untouched; the scale update is a
// device kernel. A training step therefore never waits for the host.
//
// Per step (the loss gradient having been multiplied by scale()):
//            scaler.unscale(grads)   found_inf = 0; grads /= scale; found_inf |= non-finite
//            [clip]                  on the true (unscaled) gradients
//            optimizer.step()        skipped on the device when found_inf (set_found_inf)
//            scaler.update()         backoff / growth on the device
// (The Trainer's fp16 path, which scales the loss gradient on the device, lands with the
// mixed-precision modules; the scaler itself is complete and tested on CPU and GPU.)
//
// `check()` (call it where the host syncs anyway, e.g. at log time) throws when the scale hit
// the minimum, instead of letting training continue on zeroed updates. Not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/core/tensor.h"
#include "stoker/ops/training.h"

namespace stoker::amp {

struct GradScalerOptions {
  float init_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
  int32_t hysteresis = 1;  // 1 = PyTorch (back off at every overflow)
  float min_scale = 1.0f;  // reaching it stops training with a clear message (check())
};

class GradScaler {
 public:
  explicit GradScaler(Device device, GradScalerOptions options = {});

  // The current scale (rank-0 f32 on the device) and the overflow flag of this step.
  const Tensor& scale() const { return scale_; }
  const Tensor& found_inf() const { return found_inf_; }

  // found_inf = 0, then divides every gradient by the scale and flags any NaN/Inf.
  void unscale(std::span<const Tensor> grads);
  // Backs off or grows the scale from this step's found_inf (on the device).
  void update();

  // Host reads (each a host sync): the scale value, and the growth tracker.
  float scale_value() const;
  int32_t growth_tracker() const;
  // Throws stoker::Error when the scale reached min_scale (called at log time).
  void check() const;

  // Device state for checkpoints: "scale" (f32) and "state" (i32[3]).
  std::vector<std::pair<std::string, Tensor>> state();
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);

  const GradScalerOptions& options() const { return options_; }

 private:
  GradScalerOptions options_;
  Tensor scale_;      // f32 []
  Tensor state_;      // i32 [3]: growth tracker, hysteresis left, hit min scale
  Tensor found_inf_;  // f32 []
};

}  // namespace stoker::amp
