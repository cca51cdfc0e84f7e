// LARS (ops::lars_step) on the GPU: three launches over the whole parameter list (a group of up
// to kMaxLarsTensors per launch), none of which the host waits for:
//   1. norms: each adapted tensor is cut into chunks of kNormChunk elements; a block sums p^2
//      and g^2 over a chunk (f32 fmaf, each thread in a fixed order, then a fixed shuffle tree)
//      and writes the pair to a scratch array, one pair per chunk;
//   2. rates: one warp per tensor adds its chunks' pairs in index order (lane-strided, then a
//      fixed shuffle tree), takes the square roots and writes its rate, lr * trust
//      (detail::lars_trust), to a device array; an excluded tensor's rate is lr (the host's
//      value, or read from the device learning rate when there is one);
//   3. update: every tensor in chunks of kChunk elements (multi_tensor.cuh's scheme), each
//      element detail::lars_update with its tensor's rate. found_inf is read before anything
//      is written, so an overflowed step changes neither parameters nor momentum.
// The grids, chunks and orders depend on the shapes only: the same inputs give the same bits on
// every run. The CPU sums the norms in f64, so its trust ratios (and updates) agree with these
// to float rounding, not bit for bit. Compiled with -fmad=false like optim.cu (the update's
// arithmetic is the CPU's).
#include <algorithm>
#include <memory>

#include "kernel_util.cuh"
#include "multi_tensor.cuh"
#include "ops/optim_stubs.h"

namespace stoker::ops::cuda {

namespace {

constexpr int kMaxLarsTensors = 256;  // per launch: ~12.6 KB of kernel parameters
constexpr int64_t kNormChunk = 16384;
constexpr int kLarsBlock = kMultiTensorBlock;

struct LarsArgs {
  const float* found_inf;
  const float* lr;  // device learning rate (ops::lars_step's lr), or null: c.lr
  float* partials;  // [norm chunks][2]: sum of p^2, sum of g^2
  float* rates;     // [count]: the rate of each tensor
  detail::LarsConsts c;
  int32_t count;
  int64_t norm_begin[kMaxLarsTensors + 1];   // prefix of norm chunks (0 for excluded tensors)
  int64_t chunk_begin[kMaxLarsTensors + 1];  // prefix of update chunks (find_tensor's)
  int64_t numel[kMaxLarsTensors];
  float* p[kMaxLarsTensors];
  const float* g[kMaxLarsTensors];
  float* buf[kMaxLarsTensors];
  uint8_t adapt[kMaxLarsTensors];
};
static_assert(sizeof(LarsArgs) <= 32764, "LARS kernel parameters exceed 32764 bytes");

// The tensor whose norm chunks hold `chunk`: the last t with norm_begin[t] <= chunk (tensors
// without norm chunks share their successor's begin and are passed over).
__device__ STOKER_FORCEINLINE int norm_tensor(const LarsArgs& a, int64_t chunk) {
  int lo = 0, hi = a.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.norm_begin[mid] <= chunk)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// Sums (x, y) over the block with a fixed tree; the result is valid in thread 0. Ends with a
// barrier, so the shared scratch can be reused by the next call.
__device__ STOKER_FORCEINLINE float2 block_sum2(float x, float y) {
  __shared__ float2 warp_sums[kLarsBlock / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    x += __shfl_xor_sync(~0u, x, o);
    y += __shfl_xor_sync(~0u, y, o);
  }
  if (lane == 0) warp_sums[warp] = make_float2(x, y);
  __syncthreads();
  if (warp == 0) {
    const float2 v = lane < kLarsBlock / 32 ? warp_sums[lane] : make_float2(0.0f, 0.0f);
    x = v.x;
    y = v.y;
#pragma unroll
    for (int o = kLarsBlock / 64; o > 0; o >>= 1) {
      x += __shfl_xor_sync(~0u, x, o);
      y += __shfl_xor_sync(~0u, y, o);
    }
  }
  __syncthreads();
  return make_float2(x, y);
}

__global__ void __launch_bounds__(kLarsBlock)
    lars_norms_kernel(const __grid_constant__ LarsArgs a) {
  const int64_t chunks = a.norm_begin[a.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {  // uniform across the block
    const int t = norm_tensor(a, c);
    const int64_t begin = (c - a.norm_begin[t]) * kNormChunk;
    const int64_t end = min(begin + kNormChunk, a.numel[t]);
    const float* p = a.p[t];
    const float* g = a.g[t];
    float sp = 0.0f, sg = 0.0f;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float x = p[i], y = __ldg(g + i);
      sp = fmaf(x, x, sp);
      sg = fmaf(y, y, sg);
    }
    const float2 s = block_sum2(sp, sg);
    if (threadIdx.x == 0) {
      a.partials[2 * c] = s.x;
      a.partials[2 * c + 1] = s.y;
    }
  }
}

__global__ void __launch_bounds__(kLarsBlock)
    lars_rates_kernel(const __grid_constant__ LarsArgs a) {
  const int t = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32);
  const int lane = threadIdx.x % 32;
  if (t >= a.count) return;  // whole warps leave together
  const float lr = a.lr ? *a.lr : a.c.lr;
  if (!a.adapt[t]) {
    if (lane == 0) a.rates[t] = lr;
    return;
  }
  float sp = 0.0f, sg = 0.0f;
  for (int64_t k = a.norm_begin[t] + lane; k < a.norm_begin[t + 1]; k += 32) {
    sp += a.partials[2 * k];
    sg += a.partials[2 * k + 1];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    sp += __shfl_xor_sync(~0u, sp, o);
    sg += __shfl_xor_sync(~0u, sg, o);
  }
  if (lane == 0) a.rates[t] = lr * detail::lars_trust(sqrtf(sp), sqrtf(sg), a.c);
}

__global__ void __launch_bounds__(kLarsBlock)
    lars_update_kernel(const __grid_constant__ LarsArgs a) {
  if (a.found_inf && *a.found_inf != 0.0f) return;
  const int64_t chunks = a.chunk_begin[a.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = find_tensor(a, c);
    const float lr = a.rates[t];
    const float weight_decay = a.adapt[t] ? a.c.weight_decay : 0.0f;
    const int64_t begin = (c - a.chunk_begin[t]) * kChunk;
    const int64_t end = min(begin + kChunk, a.numel[t]);
    float* p = a.p[t];
    const float* g = a.g[t];
    float* b = a.buf[t];
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float pi = p[i], bi = b[i];
      detail::lars_update(pi, bi, __ldg(g + i), lr, weight_decay, a.c.momentum);
      p[i] = pi;
      b[i] = bi;
    }
  }
}

}  // namespace

void lars_step(std::span<const Tensor> params, std::span<const Tensor> grads,
               std::span<const Tensor> bufs, std::span<const uint8_t> adapt,
               const detail::LarsConsts& c, const Tensor& found_inf, const Tensor& lr_device) {
  const Device device = params[0].device();
  const core::DeviceScope scope(device.index);
  const cudaStream_t stream = core::cuda_stream(device);
  const int64_t cap = static_cast<int64_t>(sm_count(device.index)) * 8;
  for (size_t first = 0; first < params.size(); first += kMaxLarsTensors) {
    const size_t last = std::min(params.size(), first + kMaxLarsTensors);
    auto a = std::make_unique<LarsArgs>();  // ~12 KB: off the host stack
    a->found_inf = found_inf.defined() ? static_cast<const float*>(found_inf.data()) : nullptr;
    a->lr = lr_device.defined() ? static_cast<const float*>(lr_device.data()) : nullptr;
    a->c = c;
    int n = 0;
    int64_t norm_chunks = 0, chunks = 0;
    for (size_t t = first; t < last; ++t) {
      const int64_t numel = params[t].numel();
      if (numel == 0) continue;
      a->norm_begin[n] = norm_chunks;
      a->chunk_begin[n] = chunks;
      a->numel[n] = numel;
      a->p[n] = static_cast<float*>(params[t].data());
      a->g[n] = static_cast<const float*>(grads[t].data());
      a->buf[n] = static_cast<float*>(bufs[t].data());
      a->adapt[n] = adapt[t] != 0 ? 1 : 0;
      if (adapt[t] != 0) norm_chunks += (numel + kNormChunk - 1) / kNormChunk;
      chunks += (numel + kChunk - 1) / kChunk;
      ++n;
    }
    if (n == 0) continue;
    a->count = n;
    a->norm_begin[n] = norm_chunks;
    a->chunk_begin[n] = chunks;
    // Stream-ordered pool memory: reused by later work on this stream only after the kernels.
    const Tensor scratch = Tensor::empty({2 * norm_chunks + n}, DType::f32, device);
    a->partials = static_cast<float*>(scratch.data());
    a->rates = a->partials + 2 * norm_chunks;
    if (norm_chunks > 0) {
      lars_norms_kernel<<<static_cast<unsigned>(std::min(norm_chunks, cap)), kLarsBlock, 0,
                          stream>>>(*a);
      STOKER_CUDA_CHECK(cudaGetLastError());
    }
    lars_rates_kernel<<<static_cast<unsigned>((n * 32 + kLarsBlock - 1) / kLarsBlock), kLarsBlock,
                        0, stream>>>(*a);
    STOKER_CUDA_CHECK(cudaGetLastError());
    lars_update_kernel<<<static_cast<unsigned>(std::min(chunks, cap)), kLarsBlock, 0, stream>>>(*a);
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
}

STOKER_REGISTER_STUB(lars_step, lars_step);

}  // namespace stoker::ops::cuda
