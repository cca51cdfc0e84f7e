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
#include "ops/quant_math.h"
#include "stoker/ops/quantize.h"

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

// ---- updates over compact state (bf16, block-wise 8-bit; ops/optim.h) ----
//
// One launch over the list, like `launch` above, but a tensor's chunk depends on how its state
// is stored: kChunk elements for f32 and bf16 state (grid-stride within the chunk), one
// quantization block for 8-bit state. An 8-bit block is handled by one CUDA block: each thread
// decodes, updates and keeps up to 16 values in registers, the block reduces the new absmax,
// then each thread encodes its values. The tensor (and so the branch) is uniform in a block,
// which makes the __syncthreads of the reduction legal.
constexpr int kMaxCompactTensors = 256;
constexpr int kMaxQ8PerThread = 4096 / kOptimBlock;

struct CompactArgs {
  const float* found_inf;
  float maps[2][256];               // the 8-bit map of each state (decoding)
  detail::EncodeTable encoders[2];  // its encode table (quant_math.h)
  int64_t block;
  int32_t stochastic;
  uint64_t seed, offset;
  int32_t count;
  int64_t chunk_begin[kMaxCompactTensors + 1];
  int64_t numel[kMaxCompactTensors];
  int64_t base[kMaxCompactTensors];  // list-wide index of the first element (rounding draws)
  float* p[kMaxCompactTensors];
  const float* g[kMaxCompactTensors];
  void* s[2][kMaxCompactTensors];
  float* absmax[2][kMaxCompactTensors];
  uint8_t form[kMaxCompactTensors];
};
static_assert(sizeof(CompactArgs) <= 32764, "compact optimizer kernel parameters too large");

__device__ STOKER_FORCEINLINE int find_compact_tensor(const CompactArgs& a, int64_t chunk) {
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

// Op: K (states) and operator()(float& p, float g, float* s).
template <int K, typename Op>
__global__ void __launch_bounds__(kOptimBlock)
    compact_kernel(const __grid_constant__ CompactArgs a, Op op) {
  if (a.found_inf && *a.found_inf != 0.0f) return;
  __shared__ float maps[K][256];
  __shared__ detail::EncodeTable encoders[K];
  __shared__ float scratch[K][kOptimBlock / 32];
  for (int i = threadIdx.x; i < K * 256; i += blockDim.x)
    maps[i / 256][i % 256] = a.maps[i / 256][i % 256];
  static_assert(sizeof(detail::EncodeTable) % 4 == 0, "the table is copied in 4-byte words");
  constexpr int kTableWords = sizeof(detail::EncodeTable) / 4;
  for (int i = threadIdx.x; i < K * kTableWords; i += blockDim.x)
    reinterpret_cast<uint32_t*>(&encoders[i / kTableWords])[i % kTableWords] =
        reinterpret_cast<const uint32_t*>(&a.encoders[i / kTableWords])[i % kTableWords];
  __syncthreads();
  const int64_t chunks = a.chunk_begin[a.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = find_compact_tensor(a, c);
    const int form = a.form[t];
    float* p = a.p[t];
    const float* g = a.g[t];
    if (form == detail::kStateQ8) {
      const int64_t qb = c - a.chunk_begin[t];
      const int64_t begin = qb * a.block;
      const int64_t end = min(begin + a.block, a.numel[t]);
      float scale[K], local[K], vals[K][kMaxQ8PerThread];
#pragma unroll
      for (int k = 0; k < K; ++k) scale[k] = a.absmax[k][t][qb], local[k] = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxQ8PerThread; ++j) {
        const int64_t i = begin + threadIdx.x + static_cast<int64_t>(j) * kOptimBlock;
        if (j * kOptimBlock < a.block && i < end) {
          float v[K];
#pragma unroll
          for (int k = 0; k < K; ++k)
            v[k] = maps[k][static_cast<const uint8_t*>(a.s[k][t])[i]] * scale[k];
          float pi = p[i];
          op(pi, g[i], v);
          p[i] = pi;
#pragma unroll
          for (int k = 0; k < K; ++k) {
            vals[k][j] = v[k];
            local[k] = fmaxf(local[k], fabsf(v[k]));
          }
        }
      }
      // The new absmax of each state over the block (exact: max does not depend on order).
      float next[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float m = local[k];
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
        if ((threadIdx.x & 31) == 0) scratch[k][threadIdx.x / 32] = m;
      }
      __syncthreads();  // every thread has read the old absmax before thread 0 writes it
#pragma unroll
      for (int k = 0; k < K; ++k) {
        next[k] = 0.0f;
        for (int w = 0; w < kOptimBlock / 32; ++w) next[k] = fmaxf(next[k], scratch[k][w]);
        if (threadIdx.x == 0) a.absmax[k][t][qb] = next[k];
      }
      __syncthreads();  // scratch is reused by the next chunk
#pragma unroll
      for (int j = 0; j < kMaxQ8PerThread; ++j) {
        const int64_t i = begin + threadIdx.x + static_cast<int64_t>(j) * kOptimBlock;
        if (j * kOptimBlock < a.block && i < end) {
#pragma unroll
          for (int k = 0; k < K; ++k)
            static_cast<uint8_t*>(a.s[k][t])[i] =
                detail::encode_nearest(encoders[k], detail::normalize_by(vals[k][j], next[k]));
        }
      }
    } else {
      const int64_t begin = (c - a.chunk_begin[t]) * kChunk;
      const int64_t end = min(begin + kChunk, a.numel[t]);
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
        float v[K];
        float pi = p[i];
        if (form == detail::kStateF32) {
#pragma unroll
          for (int k = 0; k < K; ++k) v[k] = static_cast<const float*>(a.s[k][t])[i];
          op(pi, g[i], v);
#pragma unroll
          for (int k = 0; k < K; ++k) static_cast<float*>(a.s[k][t])[i] = v[k];
        } else {
#pragma unroll
          for (int k = 0; k < K; ++k)
            v[k] = core::bf16_bits_to_float(static_cast<const uint16_t*>(a.s[k][t])[i]);
          op(pi, g[i], v);
          const uint32_t r = a.stochastic
                                 ? detail::state_rounding_bits(a.seed, a.offset,
                                                               static_cast<uint64_t>(a.base[t] + i))
                                 : 0u;
#pragma unroll
          for (int k = 0; k < K; ++k)
            static_cast<uint16_t*>(a.s[k][t])[i] =
                a.stochastic ? detail::float_to_bf16_stochastic(v[k], r >> (16 * k))
                             : core::float_to_bf16_bits(v[k]);
        }
        p[i] = pi;
      }
    }
  }
}

detail::StateForm form_of(const StateTensor& s) {
  switch (s.values.dtype()) {
    case DType::bf16:
      return detail::kStateBF16;
    case DType::u8:
      return detail::kStateQ8;
    default:
      return detail::kStateF32;
  }
}

template <int K, typename Op>
void launch_compact(std::span<const Tensor> params, std::span<const Tensor> grads,
                    std::array<std::span<const StateTensor>, K> states,
                    std::array<bool, K> is_signed, const StateStorage& st, const Tensor& found_inf,
                    Op op) {
  const Device device = params[0].device();
  core::DeviceScope scope(device.index);
  int64_t base = 0;
  for (size_t first = 0; first < params.size(); first += kMaxCompactTensors) {
    const size_t last = std::min(params.size(), first + kMaxCompactTensors);
    auto a = std::make_unique<CompactArgs>();
    a->found_inf = found_inf.defined() ? static_cast<const float*>(found_inf.data()) : nullptr;
    for (int k = 0; k < K; ++k) {
      const auto& m = dynamic_map(is_signed[k]);
      std::copy(m.begin(), m.end(), a->maps[k]);
      a->encoders[k] = detail::encode_table(is_signed[k]);
    }
    a->block = st.block;
    a->stochastic = st.stochastic_rounding ? 1 : 0;
    a->seed = st.seed;
    a->offset = st.offset;
    int n = 0;
    int64_t chunks = 0;
    for (size_t t = first; t < last; ++t) {
      const int64_t numel = params[t].numel();
      const int64_t at = base;
      base += numel;
      if (numel == 0) continue;
      const detail::StateForm form = form_of(states[0][t]);
      a->chunk_begin[n] = chunks;
      a->numel[n] = numel;
      a->base[n] = at;
      a->p[n] = static_cast<float*>(params[t].data());
      a->g[n] = static_cast<const float*>(grads[t].data());
      a->form[n] = form;
      for (int k = 0; k < K; ++k) {
        a->s[k][n] = states[k][t].values.data();
        a->absmax[k][n] =
            form == detail::kStateQ8 ? static_cast<float*>(states[k][t].absmax.data()) : nullptr;
      }
      const int64_t per_chunk = form == detail::kStateQ8 ? st.block : kChunk;
      chunks += (numel + per_chunk - 1) / per_chunk;
      ++n;
    }
    if (n == 0) continue;
    a->count = n;
    a->chunk_begin[n] = chunks;
    const unsigned grid = static_cast<unsigned>(
        std::min<int64_t>(chunks, static_cast<int64_t>(sm_count(device.index)) * 8));
    compact_kernel<K><<<grid, kOptimBlock, 0, core::cuda_stream(device)>>>(*a, op);
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
}

struct SgdCompactOp {
  detail::SgdConsts c;
  __device__ void operator()(float& p, float g, float* s) const {
    detail::sgd_update(p, s[0], g, c);
  }
};

struct AdamWCompactOp {
  detail::AdamWConsts c;
  const AdamWStepState* state;
  __device__ void operator()(float& p, float g, float* s) const {
    detail::AdamWConsts k = c;
    if (state) {
      k.step_size = state->step_size;
      k.bc2_sqrt = state->bc2_sqrt;
    }
    detail::adamw_update(p, s[0], s[1], g, k);
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

void sgd_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,
                      std::span<const StateTensor> bufs, const detail::SgdConsts& c,
                      const StateStorage& storage, const Tensor& found_inf) {
  launch_compact<1>(params, grads, {bufs}, {true}, storage, found_inf, SgdCompactOp{c});
}

void adamw_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,
                        std::span<const StateTensor> exp_avgs,
                        std::span<const StateTensor> exp_avg_sqs, const detail::AdamWConsts& c,
                        const StateStorage& storage, const Tensor& found_inf,
                        const Tensor& step_state, double beta1, double beta2, double lr) {
  AdamWStepState* st = nullptr;
  if (step_state.defined()) {
    const core::DeviceScope scope(step_state.device().index);
    st = static_cast<AdamWStepState*>(step_state.data());
    adamw_advance_kernel<<<1, 1, 0, core::cuda_stream(step_state.device())>>>(
        st, found_inf.defined() ? static_cast<const float*>(found_inf.data()) : nullptr, beta1,
        beta2, lr);
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
  launch_compact<2>(params, grads, {exp_avgs, exp_avg_sqs}, {true, false}, storage, found_inf,
                    AdamWCompactOp{c, st});
}

}  // namespace stoker::ops::cuda
