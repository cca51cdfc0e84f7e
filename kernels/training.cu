// CUDA training-step ops (ops/training.h), all on the device so that a step never syncs the
// host: clipping by a total norm and loss-scale unscaling over whole gradient lists (one
// multi-tensor launch, multi_tensor.cuh), the loss-scale update and the loss monitor (one
// thread each). The one-thread math is ops/training_math.h's, shared with the CPU; like
// optim.cu this file is compiled with -fmad=false (src/CMakeLists.txt), so that nothing fuses
// implicitly and both sides give the same bits (scale_update's `grown - grown == 0` finiteness
// test, for one, would not hold as an fma).
#include "kernel_util.cuh"
#include "multi_tensor.cuh"
#include "ops/training_math.h"
#include "ops/training_stubs.h"

namespace stoker::ops::cuda {

namespace {

// p *= min(1, max_norm / (norm + 1e-6)); a NaN norm leaves p alone (the scaler or the NaN
// check deals with it), as the CPU does.
struct ClipOp {
  float max_norm;
  __device__ void operator()(const MultiTensorArgs& a, int t, int64_t i) const {
    const float factor = max_norm / (*a.scalar + 1e-6f);
    if (factor < 1.0f) a.p[t][i] *= factor;
  }
};

// g *= 1/scale; a non-finite g sets the flag (every writer writes 1: a benign race).
struct UnscaleOp {
  __device__ void operator()(const MultiTensorArgs& a, int t, int64_t i) const {
    const float inv = static_cast<float>(1.0 / static_cast<double>(*a.scalar));
    const float g = a.p[t][i];
    if (!isfinite(g)) *a.flag = 1.0f;
    a.p[t][i] = g * inv;
  }
};

__global__ void update_scale_kernel(float* scale, int32_t* state, const float* found_inf,
                                    ScaleUpdate u) {
  detail::scale_update(*scale, state, *found_inf != 0.0f, u.growth_factor, u.backoff_factor,
                       u.growth_interval, u.hysteresis, u.min_scale);
}

__global__ void loss_monitor_kernel(LossMonitorState* s, const float* loss, int64_t step,
                                    const int64_t* step_device) {
  detail::loss_monitor_fold(*s, *loss, step_device ? *step_device : step);
}

}  // namespace

void clip_by_total_norm(std::span<const Tensor> xs, const Tensor& total_norm, float max_norm) {
  launch_multi_tensor(xs, {}, {}, {}, Tensor(), ClipOp{max_norm}, total_norm);
}

void unscale_and_check(std::span<const Tensor> grads, const Tensor& scale,
                       const Tensor& found_inf) {
  launch_multi_tensor(grads, {}, {}, {}, Tensor(), UnscaleOp{}, scale, found_inf);
}

void update_scale(const Tensor& scale, const Tensor& state, const Tensor& found_inf,
                  const ScaleUpdate& u) {
  core::DeviceScope scope(scale.device().index);
  update_scale_kernel<<<1, 1, 0, core::cuda_stream(scale.device())>>>(
      static_cast<float*>(scale.data()), static_cast<int32_t*>(state.data()),
      static_cast<const float*>(found_inf.data()), u);
  STOKER_CUDA_CHECK(cudaGetLastError());
}

void loss_monitor_update(const Tensor& monitor, const Tensor& loss, int64_t step,
                         const Tensor& step_device) {
  core::DeviceScope scope(monitor.device().index);
  loss_monitor_kernel<<<1, 1, 0, core::cuda_stream(monitor.device())>>>(
      static_cast<LossMonitorState*>(monitor.data()), static_cast<const float*>(loss.data()), step,
      step_device.defined() ? static_cast<const int64_t*>(step_device.data()) : nullptr);
  STOKER_CUDA_CHECK(cudaGetLastError());
}

STOKER_REGISTER_STUB(clip_by_total_norm, clip_by_total_norm);
STOKER_REGISTER_STUB(unscale_and_check, unscale_and_check);
STOKER_REGISTER_STUB(update_scale, update_scale);
STOKER_REGISTER_STUB(loss_monitor_update, loss_monitor_update);

}  // namespace stoker::ops::cuda
