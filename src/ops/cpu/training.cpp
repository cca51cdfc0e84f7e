// CPU reference of the training-step ops (ops/training.h): clipping by a total norm, loss-scale
// unscaling and update, the loss monitor. The scale update and the monitor's fold are
// ops/training_math.h's, shared with kernels/training.cu. Device scalars are host memory here:
// reading them is free.
#include <oneapi/tbb/parallel_reduce.h>

#include <cmath>

#include "ops/cpu/parallel.h"
#include "ops/training_math.h"
#include "ops/training_stubs.h"

namespace stoker::ops::cpu {

void clip_by_total_norm(std::span<const Tensor> xs, const Tensor& total_norm, float max_norm) {
  const float norm = *static_cast<const float*>(total_norm.data());
  const float factor = max_norm / (norm + 1e-6f);
  if (!(factor < 1.0f)) return;  // also leaves NaN norms alone, like clamp(max=1) of NaN
  for (const Tensor& x : xs) {
    float* p = static_cast<float*>(x.data());
    parallel_range(x.numel(), [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) p[i] *= factor;
    });
  }
}

void unscale_and_check(std::span<const Tensor> grads, const Tensor& scale,
                       const Tensor& found_inf) {
  const float inv = static_cast<float>(1.0 / static_cast<double>(*scale.data<float>()));
  bool bad = false;
  for (const Tensor& g : grads) {
    float* p = static_cast<float*>(g.data());
    const bool tensor_bad = tbb::parallel_reduce(
        tbb::blocked_range<int64_t>(0, g.numel(), kGrain), false,
        [&](const tbb::blocked_range<int64_t>& r, bool acc) {
          for (int64_t i = r.begin(); i < r.end(); ++i) {
            acc = acc || !std::isfinite(p[i]);
            p[i] *= inv;
          }
          return acc;
        },
        [](bool a, bool b) { return a || b; });
    bad = bad || tensor_bad;
  }
  if (bad) *found_inf.data<float>() = 1.0f;
}

void update_scale(const Tensor& scale, const Tensor& state, const Tensor& found_inf,
                  const ScaleUpdate& u) {
  detail::scale_update(*scale.data<float>(), state.data<int32_t>(),
                       *found_inf.data<float>() != 0.0f, u.growth_factor, u.backoff_factor,
                       u.growth_interval, u.hysteresis, u.min_scale);
}

void loss_monitor_update(const Tensor& monitor, const Tensor& loss, int64_t step,
                         const Tensor& step_device) {
  if (step_device.defined()) step = *static_cast<const int64_t*>(step_device.data());
  detail::loss_monitor_fold(*static_cast<LossMonitorState*>(monitor.data()),
                            *static_cast<const float*>(loss.data()), step);
}

STOKER_REGISTER_STUB(clip_by_total_norm, clip_by_total_norm);
STOKER_REGISTER_STUB(unscale_and_check, unscale_and_check);
STOKER_REGISTER_STUB(update_scale, update_scale);
STOKER_REGISTER_STUB(loss_monitor_update, loss_monitor_update);

}  // namespace stoker::ops::cpu
