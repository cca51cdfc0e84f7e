// Multi-tensor SGD, AdamW, gradient clipping and loss-scale unscaling: every parameter of a model
// updated in one launch (or a few, for very long lists), instead of one launch per tensor and per
// operation as a naive loop would.
//
// Each tensor is cut into chunks of kChunk elements; the chunk counts' prefix sums travel in the
// kernel parameters with the tensors' pointers, and block b handles chunks b, b + grid, ... .
// A chunk's tensor is found by binary search over the prefix (uniform across the block). The
// per-element math is ops/optim_math.h, shared with the CPU; this file is compiled with
// -fmad=false so that only the explicit fmaf calls fuse, on both sides: bit-identical updates.
//
// found_inf (optional, a device flag written by the gradient scaler) is read by every thread
// before it writes anything: an overflowed step leaves parameters and state untouched without
// a host sync.
#include <algorithm>
#include <vector>

#include "kernel_util.cuh"
#include "ops/optim_backend.h"

namespace stoker::ops::cuda {

namespace {

constexpr int64_t kChunk = 65536;
constexpr int kMaxTensorsPerLaunch = 480;  // 4 pointers + 2 ints per tensor within 32 KB
constexpr int kOptimBlock = 256;

struct OptimArgs {
  const float* found_inf;
  float* flag;          // a device flag some updates set (unscale: found_inf)
  const float* scalar;  // a device scalar some updates read (the clipping norm)
  int32_t count;
  int64_t chunk_begin[kMaxTensorsPerLaunch + 1];
  int64_t numel[kMaxTensorsPerLaunch];
  float* p[kMaxTensorsPerLaunch];
  const float* g[kMaxTensorsPerLaunch];
  float* s1[kMaxTensorsPerLaunch];
  float* s2[kMaxTensorsPerLaunch];
};
static_assert(sizeof(OptimArgs) <= 32764, "optimizer kernel parameters exceed 32764 bytes");

__device__ STOKER_FORCEINLINE int find_tensor(const OptimArgs& a, int64_t chunk) {
  int lo = 0, hi = a.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.chunk_begin[mid] <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

template <typename Update>
__global__ void __launch_bounds__(kOptimBlock)
    optim_kernel(const __grid_constant__ OptimArgs a, Update update) {
  if (a.found_inf && *a.found_inf != 0.0f) return;
  const int64_t chunks = a.chunk_begin[a.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = find_tensor(a, c);
    const int64_t begin = (c - a.chunk_begin[t]) * kChunk;
    const int64_t end = min(begin + kChunk, a.numel[t]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) update(a, t, i);
  }
}

// Launches `update` over the tensors in groups that fit the parameter block.
template <typename Update>
void launch(std::span<const Tensor> params, std::span<const Tensor> grads,
            std::span<const Tensor> s1, std::span<const Tensor> s2, const Tensor& found_inf,
            Update update, const Tensor& scalar = {}, const Tensor& flag = {}) {
  const Device device = params[0].device();
  core::DeviceScope scope(device.index);
  for (size_t first = 0; first < params.size(); first += kMaxTensorsPerLaunch) {
    const size_t last = std::min(params.size(), first + kMaxTensorsPerLaunch);
    auto a = std::make_unique<OptimArgs>();  // 30 KB: keep it off the host stack
    a->found_inf = found_inf.defined() ? static_cast<const float*>(found_inf.data()) : nullptr;
    a->scalar = scalar.defined() ? static_cast<const float*>(scalar.data()) : nullptr;
    a->flag = flag.defined() ? static_cast<float*>(flag.data()) : nullptr;
    int n = 0;
    int64_t chunks = 0;
    for (size_t t = first; t < last; ++t) {
      if (params[t].numel() == 0) continue;
      a->chunk_begin[n] = chunks;
      a->numel[n] = params[t].numel();
      a->p[n] = static_cast<float*>(params[t].data());
      a->g[n] = grads.empty() ? nullptr : static_cast<const float*>(grads[t].data());
      a->s1[n] = s1.empty() ? nullptr : static_cast<float*>(s1[t].data());
      a->s2[n] = s2.empty() ? nullptr : static_cast<float*>(s2[t].data());
      chunks += (params[t].numel() + kChunk - 1) / kChunk;
      ++n;
    }
    if (n == 0) continue;
    a->count = n;
    a->chunk_begin[n] = chunks;
    const unsigned grid = static_cast<unsigned>(
        std::min<int64_t>(chunks, static_cast<int64_t>(sm_count(device.index)) * 8));
    optim_kernel<<<grid, kOptimBlock, 0, core::cuda_stream(device)>>>(*a, update);
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
}

struct SgdOp {
  detail::SgdConsts c;
  __device__ void operator()(const OptimArgs& a, int t, int64_t i) const {
    float p = a.p[t][i];
    float buf = c.has_momentum ? a.s1[t][i] : 0.0f;
    detail::sgd_update(p, buf, a.g[t][i], c);
    a.p[t][i] = p;
    if (c.has_momentum) a.s1[t][i] = buf;
  }
};

struct AdamWOp {
  detail::AdamWConsts c;
  const AdamWStepState* state;  // device step state (bias corrections), or null
  __device__ void operator()(const OptimArgs& a, int t, int64_t i) const {
    float p = a.p[t][i], m = a.s1[t][i], v = a.s2[t][i];
    detail::AdamWConsts k = c;
    if (state) {
      k.step_size = state->step_size;
      k.bc2_sqrt = state->bc2_sqrt;
    }
    detail::adamw_update(p, m, v, a.g[t][i], k);
    a.p[t][i] = p;
    a.s1[t][i] = m;
    a.s2[t][i] = v;
  }
};

// p *= min(1, max_norm / (norm + 1e-6)); a NaN norm leaves p alone (the scaler or the NaN
// check deals with it), as the CPU does.
struct ClipOp {
  float max_norm;
  __device__ void operator()(const OptimArgs& a, int t, int64_t i) const {
    const float factor = max_norm / (*a.scalar + 1e-6f);
    if (factor < 1.0f) a.p[t][i] *= factor;
  }
};

// g *= 1/scale; a non-finite g sets the flag (every writer writes 1: a benign race).
struct UnscaleOp {
  __device__ void operator()(const OptimArgs& a, int t, int64_t i) const {
    const float inv = static_cast<float>(1.0 / static_cast<double>(*a.scalar));
    const float g = a.p[t][i];
    if (!isfinite(g)) *a.flag = 1.0f;
    a.p[t][i] = g * inv;
  }
};

// Mixed-precision weight refresh: the f32 master (p) rounded into its half copy. The copy's
// pointer travels in s1 (typed as float* there, reinterpreted here: one argument block serves
// every multi-tensor op).
template <typename T>
struct CastToHalfOp {
  __device__ void operator()(const OptimArgs& a, int t, int64_t i) const {
    reinterpret_cast<T*>(a.s1[t])[i] = from_float<T>(a.p[t][i]);
  }
};

__global__ void adamw_advance_kernel(AdamWStepState* s, const float* found_inf, double beta1,
                                     double beta2, double lr) {
  detail::adamw_advance(*s, found_inf && *found_inf != 0.0f, beta1, beta2, lr);
}

__global__ void update_scale_kernel(float* scale, int32_t* state, const float* found_inf,
                                    ScaleUpdate u) {
  detail::scale_update(*scale, state, *found_inf != 0.0f, u.growth_factor, u.backoff_factor,
                       u.growth_interval, u.hysteresis, u.min_scale);
}

__global__ void loss_monitor_kernel(LossMonitorState* s, const float* loss, int64_t step) {
  const float l = *loss;
  if (isfinite(l)) {
    s->loss_sum += l;
    s->steps += 1;
    s->last_finite_loss = l;
    s->last_finite_step = step;
  } else if (s->first_bad_step < 0) {
    s->first_bad_step = step;
  }
}

}  // namespace

void clip_by_total_norm(std::span<const Tensor> xs, const Tensor& total_norm, float max_norm) {
  launch(xs, {}, {}, {}, Tensor(), ClipOp{max_norm}, total_norm);
}

void unscale_and_check(std::span<const Tensor> grads, const Tensor& scale,
                       const Tensor& found_inf) {
  launch(grads, {}, {}, {}, Tensor(), UnscaleOp{}, scale, found_inf);
}

void cast_multi(std::span<const Tensor> dsts, std::span<const Tensor> srcs) {
  if (dsts[0].dtype() == DType::f16)
    launch(srcs, {}, dsts, {}, Tensor(), CastToHalfOp<core::Half>{});
  else
    launch(srcs, {}, dsts, {}, Tensor(), CastToHalfOp<core::BFloat16>{});
}

void update_scale(const Tensor& scale, const Tensor& state, const Tensor& found_inf,
                  const ScaleUpdate& u) {
  core::DeviceScope scope(scale.device().index);
  update_scale_kernel<<<1, 1, 0, core::cuda_stream(scale.device())>>>(
      static_cast<float*>(scale.data()), static_cast<int32_t*>(state.data()),
      static_cast<const float*>(found_inf.data()), u);
  STOKER_CUDA_CHECK(cudaGetLastError());
}

void loss_monitor_update(const Tensor& monitor, const Tensor& loss, int64_t step) {
  core::DeviceScope scope(monitor.device().index);
  loss_monitor_kernel<<<1, 1, 0, core::cuda_stream(monitor.device())>>>(
      static_cast<LossMonitorState*>(monitor.data()), static_cast<const float*>(loss.data()), step);
  STOKER_CUDA_CHECK(cudaGetLastError());
}

void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
              std::span<const Tensor> bufs, const detail::SgdConsts& c, const Tensor& found_inf) {
  launch(params, grads, c.has_momentum ? bufs : std::span<const Tensor>{}, {}, found_inf, SgdOp{c});
}

void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                const detail::AdamWConsts& c, const Tensor& found_inf, const Tensor& step_state,
                double beta1, double beta2, double lr) {
  AdamWStepState* st = nullptr;
  if (step_state.defined()) {
    // One thread advances the step count and the bias corrections (unless skipped); the update
    // kernel then reads them: the host never learns whether the step was taken.
    const core::DeviceScope scope(step_state.device().index);
    st = static_cast<AdamWStepState*>(step_state.data());
    adamw_advance_kernel<<<1, 1, 0, core::cuda_stream(step_state.device())>>>(
        st, found_inf.defined() ? static_cast<const float*>(found_inf.data()) : nullptr, beta1,
        beta2, lr);
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
  launch(params, grads, exp_avgs, exp_avg_sqs, found_inf, AdamWOp{c, st});
}

}  // namespace stoker::ops::cuda
