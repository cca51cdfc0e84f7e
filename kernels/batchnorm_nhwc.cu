// CUDA batch normalization for channels-last (NHWC) training: the training forward and the
// backward. (NCHW and the evaluation forward stay on cuDNN: src/ops/cuda/batchnorm_cudnn.cpp.)
//
// Why our own kernels: cuDNN's legacy NHWC batch norm (cudnnBatchNormalizationForwardTraining /
// Backward, CUDNN_BATCHNORM_SPATIAL_PERSISTENT) measured ~19 ms for the forward of the ResNet
// stem BN, x = [256, 112, 112, 64] bf16 (411 MB: 21 GB/s on an H200 that streams 4 TB/s), and
// batch norm was 85 % of a ResNet-18 step (Nsight Compute, 2026-11-29). Batch norm is memory
// bound: the forward must read x twice (statistics, then normalize) and write y once; the
// backward reads dy and x twice and writes dx once. These kernels do exactly that.
//
// x (and y, dy, dx) is viewed as [M = N*H*W, C] row-major. Every pass uses the same 2-D grid:
// block (s, t) owns row slab s (rows [s * R, min(M, (s + 1) * R))) and channel tile t (kTile
// adjacent channels). Thread (tx, ty) of a block owns V adjacent channels (a 16-byte Pack when C
// is a multiple of V and every tensor is 16-byte aligned, else V = 1) and the slab's rows
// ty, ty + kTy, ... — so a warp reads whole runs of adjacent channels of a few rows: coalesced.
//
// Forward (batchnorm_forward_train_from_sums skips 1 and 2: one thread per channel derives the
// same outputs from the convolution's sums, and pass 3 runs as below):
//  1. partial statistics: each thread runs Welford (count, mean, M2) in fp32 over its rows for
//     each of its channels; the block folds its kTy row lanes in index order with Chan's
//     formula (fp32) and writes (mean, M2) per (slab, channel) to pool scratch.
//  2. finalize, one thread per channel: Chan's formula in fp64 over the slabs in index order
//     (a slab's count is known from the shape), then save_mean, save_invstd = 1 / sqrt(var + eps)
//     with the biased var, running stats with the unbiased var * M / (M - 1), and
//     scale = invstd * gamma from the f32 invstd as saved (bn_scale; the backward recomputes it).
//  3. normalize: y = (x - mean) * scale + beta (the centred form: no cancellation when |mean| is
//     large against the spread).
// Backward (xhat = (x - mean) * invstd from the saved statistics):
//  1. partial sums per (slab, channel) of dy and dy * xhat (fp32 per thread, folded in order);
//  2. finalize per channel in fp64 over the slabs: dbeta += sum dy, dgamma += sum dy * xhat,
//     k = gamma * invstd, a = sum dy / M, b = sum dy * xhat / M;
//  3. dx = k * (dy - a - xhat * b).
// dx may alias dy (or the fused ReLU's y) and the forward's y may alias x exactly: pass 1 reads
// everything before pass 3 writes, and pass 3 reads each element before writing it.
//
// Fused ReLU (BatchNormParams::relu; the Relu template flag of the forward, Mask of the
// backward): forward pass 3 writes relu((x - mean) * scale + beta); backward passes 1 and 3 use
// dz = dy * (y > 0) (nn_math.h's relu_grad, NaN counts as positive) wherever the plain kernels
// use dy — dz is never stored. Given beta (and no residual) the backward does not read y
// (Mask::x): it rebuilds y from the x it reads anyway, as pass 3 computed it. That is bit-exact:
// the same save_mean, the same scale (bn_scale of the saved f32 invstd and gamma: why the
// finalizes derive scale from the ROUNDED invstd), the same explicit fmaf, ReLU and rounding to
// T. Without beta it reads y (Mask::y). Activation-sized traffic, forward: 2 reads + 1 write
// (x twice, y) against 3 reads + 2 writes for the BN kernels then a ReLU kernel; backward:
// 4 reads + 1 write ((dy, x) twice, dx; 6 + 1 reading y) against 6 reads + 2 writes for
// relu_backward (dy, y -> dz) then the BN backward (dz, x twice, dx) — and no dz buffer.
//
// Residual tail (the `residual` / `dresidual` arguments, the Res template flag): forward pass 3
// reads r too and writes act(round(bn(x)) + r) — bn(x) rounded to T first, the sum rounded once,
// as the BN kernel then the add kernel would (3 reads + 1 write against 5 + 3 for BN, add, ReLU);
// backward pass 1 also writes dz = dy * (y > 0) into dresidual (y is read: it depends on r), and
// pass 3 reads that dz in place of (dy, y): 5 reads + 2 writes against 6 + 2 for relu_backward
// then the BN backward. dz is dy or 0, exact in T, so pass 3 sees the very values pass 1 summed.
// dresidual may alias dy.
//
// Determinism: the slab count depends only on (M, C, V) and every fold runs in a fixed order, no
// atomics; so the same inputs (with the same pointer alignment, which picks V) give the same bits
// on every run and every GPU. No host synchronization: the scratch is stream-ordered pool memory.
#include <algorithm>

#include "kernel_util.cuh"
#include "ops/cuda/batchnorm_nhwc.h"
#include "ops/nn_math.h"
#include "stoker/ops/batchnorm.h"
#include "stoker/ops/layout.h"

namespace stoker::ops::cuda {

namespace {

constexpr int kBnThreads = 256;
constexpr int64_t kTargetBlocks = 2048;  // blocks per pass: ~15 per SM on a 132-SM H200
// Rows per slab at least: 8 rows a thread (kTy = 32 row lanes for 16-byte packs). With 2 (the
// old 64), the small tensors of ResNet-50's later stages ran their statistics pass at 0.6-0.8
// TB/s on an H100 (Nsight Compute): too little work per block for its fixed merge.
constexpr int64_t kMinSlabRows = 256;

// Threads along C and rows for a V-wide Pack: a tile of 64 channels (32 for the scalar path).
template <int V>
struct Geometry {
  static constexpr int kTx = V == 1 ? 32 : 64 / V;
  static constexpr int kTy = kBnThreads / kTx;
  static constexpr int kTile = kTx * V;
  static_assert(kTx * kTy == kBnThreads);
};

struct Slabs {
  int64_t count = 1;
  int64_t rows = 0;  // rows per slab (the last may have fewer)
};

Slabs plan_slabs(int64_t m, int64_t tiles) {
  Slabs s;
  const int64_t by_rows = std::max<int64_t>(1, m / kMinSlabRows);
  const int64_t wanted = std::max<int64_t>(1, (kTargetBlocks + tiles - 1) / tiles);
  s.count = std::clamp<int64_t>(wanted, 1, std::min<int64_t>(by_rows, 1 << 20));
  s.rows = (m + s.count - 1) / s.count;
  s.count = (m + s.rows - 1) / s.rows;
  return s;
}

// Rows of a slab [r0, r1) visited by row lane ty.
__device__ STOKER_FORCEINLINE int lane_rows(int64_t r0, int64_t r1, int ty, int ty_count) {
  const int64_t n = r1 - r0;
  return n > ty ? static_cast<int>((n - ty + ty_count - 1) / ty_count) : 0;
}

// ---- forward ----

// partial_mean / partial_m2: [slabs, C].
template <int V, typename T>
__global__ void __launch_bounds__(kBnThreads)
    bn_stats_kernel(const T* x, int64_t m, int64_t channels, int64_t slab_rows, float* partial_mean,
                    float* partial_m2) {
  using G = Geometry<V>;
  __shared__ float s_mean[G::kTy][G::kTile];
  __shared__ float s_m2[G::kTy][G::kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * slab_rows;
  const int64_t r1 = std::min(m, r0 + slab_rows);
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * G::kTile;
  const int64_t c = c0 + static_cast<int64_t>(tx) * V;
  float mean[V], m2[V];
#pragma unroll
  for (int k = 0; k < V; ++k) mean[k] = m2[k] = 0.0f;
  if (c < channels) {  // V > 1: C is a multiple of V, so the whole Pack is in range
    int n = 0;
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += G::kTy) {
      float v[V];
      load_floats<V>(v, x + r * channels + c);
      ++n;
      const float inv = 1.0f / static_cast<float>(n);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float d = v[k] - mean[k];
        mean[k] = fmaf(d, inv, mean[k]);
        m2[k] = fmaf(d, v[k] - mean[k], m2[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) {
    s_mean[ty][tx * V + k] = mean[k];
    s_m2[ty][tx * V + k] = m2[k];
  }
  __syncthreads();
  const int t = ty * G::kTx + tx;
  if (t >= G::kTile || c0 + t >= channels) return;
  // Chan's merge of the row lanes in index order.
  float na = 0.0f, ma = 0.0f, qa = 0.0f;
  for (int y = 0; y < G::kTy; ++y) {
    const int cnt = lane_rows(r0, r1, y, G::kTy);
    if (cnt == 0) break;  // lanes past the slab's rows are empty, and so are all after them
    const float nb = static_cast<float>(cnt);
    const float mb = s_mean[y][t], qb = s_m2[y][t];
    const float n = na + nb;
    const float d = mb - ma;
    const float w = nb / n;
    ma = fmaf(d, w, ma);
    qa = qa + qb + d * d * na * w;
    na = n;
  }
  const int64_t o = static_cast<int64_t>(blockIdx.x) * channels + c0 + t;
  partial_mean[o] = ma;
  partial_m2[o] = qa;
}

// fp64 (count, mean, M2) of a set of values; merge() is Chan's parallel formula.
struct Moments {
  double n = 0.0, mean = 0.0, m2 = 0.0;
};

__device__ STOKER_FORCEINLINE Moments shfl_down(const Moments& a, int o) {
  Moments b;
  b.n = __shfl_down_sync(~0u, a.n, o);
  b.mean = __shfl_down_sync(~0u, a.mean, o);
  b.m2 = __shfl_down_sync(~0u, a.m2, o);
  return b;
}

__device__ STOKER_FORCEINLINE Moments merge(const Moments& a, const Moments& b) {
  if (b.n == 0.0) return a;
  if (a.n == 0.0) return b;
  Moments r;
  r.n = a.n + b.n;
  const double d = b.mean - a.mean;
  const double w = b.n / r.n;
  r.mean = a.mean + d * w;
  r.m2 = a.m2 + b.m2 + d * d * a.n * w;
  return r;
}

// The finalize kernels: one block per channel. Thread t folds slabs t, t + kFinalizeThreads, ...
// in order (fp64), a fixed shuffle tree folds each warp into its lane 0, and thread 0 folds the
// warps in order. (One warp per channel took 16 us a call on an H100 for ResNet-50's 64-channel
// layers, whose 2,048 slabs it walked 64 deep: 0.9 ms of the step in 53 launches.)
constexpr int kFinalizeThreads = 128;
constexpr int kFinalizeWarps = kFinalizeThreads / 32;

// Folds the block's per-thread values into thread 0's, in the fixed order above (fp64 folds are
// not associative: a fixed order is what makes the result the same on every run).
template <typename V, typename Fold>
__device__ STOKER_FORCEINLINE V fold_block(V v, Fold fold) {
  // Raw storage: a __shared__ array cannot have V's default member initializers.
  __shared__ alignas(V) unsigned char storage[kFinalizeWarps * sizeof(V)];
  V* warp_part = reinterpret_cast<V*>(storage);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fold(v, shfl_down(v, o));
  if (lane == 0) warp_part[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    v = warp_part[0];
    for (int w = 1; w < kFinalizeWarps; ++w) v = fold(v, warp_part[w]);
  }
  return v;
}

// The normalize pass's scale = invstd * gamma, from the f32 invstd that save_invstd keeps (not
// the fp64 one it was rounded from): the backward rebuilds the fused ReLU's output from x with
// it, so it must be the very value the forward used, recomputed from what was saved.
__device__ STOKER_FORCEINLINE float bn_scale(float invstd, float gamma) {
  return static_cast<float>(static_cast<double>(invstd) * static_cast<double>(gamma));
}

// One block per channel (fold_block's order): the slabs' (count, mean, M2) merged with Chan's
// formula in fp64; thread 0 writes the saved and running statistics and scale = invstd * gamma.
__global__ void __launch_bounds__(kFinalizeThreads)
    bn_stats_finalize_kernel(const float* partial_mean, const float* partial_m2, int64_t slabs,
                             int64_t slab_rows, int64_t m, int64_t channels, const float* gamma,
                             float eps, float momentum, float* save_mean, float* save_invstd,
                             float* running_mean, float* running_var, float* scale) {
  const int64_t c = blockIdx.x;
  Moments a;
  for (int64_t s = threadIdx.x; s < slabs; s += kFinalizeThreads) {
    Moments b;
    b.n = static_cast<double>(std::min(slab_rows, m - s * slab_rows));
    b.mean = partial_mean[s * channels + c];
    b.m2 = partial_m2[s * channels + c];
    a = merge(a, b);
  }
  a = fold_block(a, [](const Moments& x, const Moments& y) { return merge(x, y); });
  if (threadIdx.x != 0) return;
  const double md = static_cast<double>(m);
  const double var = a.m2 / md;
  const float is = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  save_mean[c] = static_cast<float>(a.mean);
  save_invstd[c] = is;
  scale[c] = bn_scale(is, gamma[c]);
  if (running_mean != nullptr) {
    const double mo = momentum;
    running_mean[c] = static_cast<float>((1.0 - mo) * running_mean[c] + mo * a.mean);
    running_var[c] = static_cast<float>((1.0 - mo) * running_var[c] + mo * var * md / (md - 1.0));
  }
}

// batchnorm_forward_train_from_sums: one thread per channel turns the convolution's f32 sums into
// the same outputs as bn_stats_finalize_kernel (mean = sum / M, biased var = sum_sq / M - mean^2
// in fp64, clamped at 0).
__global__ void __launch_bounds__(kBlockSize)
    bn_sums_finalize_kernel(const float* sum, const float* sum_sq, int64_t m, int64_t channels,
                            const float* gamma, float eps, float momentum, float* save_mean,
                            float* save_invstd, float* running_mean, float* running_var,
                            float* scale) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kBlockSize + threadIdx.x;
  if (c >= channels) return;
  const double md = static_cast<double>(m);
  const double mean = static_cast<double>(sum[c]) / md;
  const double var = fmax(static_cast<double>(sum_sq[c]) / md - mean * mean, 0.0);
  const float is = static_cast<float>(1.0 / sqrt(var + static_cast<double>(eps)));
  save_mean[c] = static_cast<float>(mean);
  save_invstd[c] = is;
  scale[c] = bn_scale(is, gamma[c]);
  if (running_mean != nullptr) {
    const double mo = momentum;
    running_mean[c] = static_cast<float>((1.0 - mo) * running_mean[c] + mo * mean);
    running_var[c] = static_cast<float>((1.0 - mo) * running_var[c] + mo * var * md / (md - 1.0));
  }
}

template <int V, bool Relu, bool Res, typename T>
__global__ void __launch_bounds__(kBnThreads)
    bn_normalize_kernel(T* y, const T* x, const T* res, int64_t m, int64_t channels,
                        int64_t slab_rows, const float* mean, const float* scale,
                        const float* beta) {
  using G = Geometry<V>;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * slab_rows;
  const int64_t r1 = std::min(m, r0 + slab_rows);
  const int64_t c = static_cast<int64_t>(blockIdx.y) * G::kTile + static_cast<int64_t>(tx) * V;
  if (c >= channels) return;
  float mu[V], sc[V], sh[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    mu[k] = __ldg(mean + c + k);
    sc[k] = __ldg(scale + c + k);
    sh[k] = __ldg(beta + c + k);
  }
#pragma unroll 4
  for (int64_t r = r0 + ty; r < r1; r += G::kTy) {
    float v[V];
    load_floats<V>(v, x + r * channels + c);
    float rv[V];
    if constexpr (Res) load_floats<V>(rv, res + r * channels + c);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      v[k] = fmaf(v[k] - mu[k], sc[k], sh[k]);
      // bn(x) rounded to T as the BN kernel stores it, then the add's fp32 sum.
      if constexpr (Res) v[k] = rv[k] + to_float(from_float<T>(v[k]));
      if constexpr (Relu) v[k] = detail::relu(v[k]);
    }
    store_floats<V>(y + r * channels + c, v);
  }
}

// ---- backward ----

// Where the fused ReLU's mask y > 0 comes from: no ReLU; the forward's output y; or y rebuilt
// from x (no residual tail: y = relu(bn(x)) depends on x alone).
enum class Mask { none, y, x };

// The normalize pass's scale and shift of channels [c, c + V) (Mask::x only; zeros otherwise).
template <int V>
struct Affine {
  float sc[V], sh[V];
};

template <int V, Mask M>
__device__ STOKER_FORCEINLINE Affine<V> load_affine(const float* invstd, const float* gamma,
                                                    const float* beta, int64_t c) {
  Affine<V> a{};
  if constexpr (M == Mask::x) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      a.sc[k] = bn_scale(__ldg(invstd + c + k), __ldg(gamma + c + k));
      a.sh[k] = __ldg(beta + c + k);
    }
  }
  return a;
}

// The gradient with respect to bn(x) at channels [c, c + V) of a row, given that row's x values
// v and the channels' save_mean mu: dy, or with a mask dz = dy * (y > 0). Mask::x recomputes y
// as bn_normalize_kernel stored it: the same save_mean, the same scale (bn_scale of the saved
// invstd), the same explicit fmaf, the ReLU and the rounding to T — so the same bits as y.
template <int V, Mask M, typename T>
__device__ STOKER_FORCEINLINE void load_grad(float (&g)[V], const T* dy_row, const T* y_row,
                                             const float (&v)[V], const float (&mu)[V],
                                             const Affine<V>& a, int64_t c) {
  load_floats<V>(g, dy_row + c);
  if constexpr (M != Mask::none) {
    float o[V];
    if constexpr (M == Mask::y) {
      load_floats<V>(o, y_row + c);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k)
        o[k] = to_float(from_float<T>(detail::relu(fmaf(v[k] - mu[k], a.sc[k], a.sh[k]))));
    }
#pragma unroll
    for (int k = 0; k < V; ++k) g[k] = detail::relu_grad(g[k], o[k]);
  }
}

// partial_dy / partial_dyx: [slabs, C] sums of dz and dz * xhat (dz: dy, masked with a ReLU).
// With Res, dz is also stored into dres.
template <int V, Mask M, bool Res, typename T>
__global__ void __launch_bounds__(kBnThreads)
    bn_grad_sums_kernel(const T* dy, const T* y, const T* x, T* dres, int64_t m, int64_t channels,
                        int64_t slab_rows, const float* mean, const float* invstd,
                        const float* gamma, const float* beta, float* partial_dy,
                        float* partial_dyx) {
  static_assert(M != Mask::x || !Res, "with the residual tail y depends on r too");
  using G = Geometry<V>;
  __shared__ float s_dy[G::kTy][G::kTile];
  __shared__ float s_dyx[G::kTy][G::kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * slab_rows;
  const int64_t r1 = std::min(m, r0 + slab_rows);
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * G::kTile;
  const int64_t c = c0 + static_cast<int64_t>(tx) * V;
  float sdy[V], sdyx[V];
#pragma unroll
  for (int k = 0; k < V; ++k) sdy[k] = sdyx[k] = 0.0f;
  if (c < channels) {
    float mu[V], is[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      mu[k] = __ldg(mean + c + k);
      is[k] = __ldg(invstd + c + k);
    }
    const Affine<V> af = load_affine<V, M>(invstd, gamma, beta, c);
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += G::kTy) {
      float g[V], v[V];
      load_floats<V>(v, x + r * channels + c);  // first: Mask::x masks dy with it
      load_grad<V, M>(g, dy + r * channels, y + r * channels, v, mu, af, c);
      if constexpr (Res) store_floats<V>(dres + r * channels + c, g);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        sdy[k] += g[k];
        sdyx[k] = fmaf(g[k], (v[k] - mu[k]) * is[k], sdyx[k]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < V; ++k) {
    s_dy[ty][tx * V + k] = sdy[k];
    s_dyx[ty][tx * V + k] = sdyx[k];
  }
  __syncthreads();
  const int t = ty * G::kTx + tx;
  if (t >= G::kTile || c0 + t >= channels) return;
  float a = 0.0f, b = 0.0f;
  for (int y = 0; y < G::kTy; ++y) {
    a += s_dy[y][t];
    b += s_dyx[y][t];
  }
  const int64_t o = static_cast<int64_t>(blockIdx.x) * channels + c0 + t;
  partial_dy[o] = a;
  partial_dyx[o] = b;
}

// Sums of two fp64 values, folded together.
struct Sums {
  double a = 0.0, b = 0.0;
};

__device__ STOKER_FORCEINLINE Sums shfl_down(const Sums& v, int o) {
  return {__shfl_down_sync(~0u, v.a, o), __shfl_down_sync(~0u, v.b, o)};
}

// One block per channel (fold_block's order): fp64 sums over the slabs; thread 0 adds into
// dbeta / dgamma and writes the dx coefficients coef = [k | a | b] ([3, C]).
__global__ void __launch_bounds__(kFinalizeThreads)
    bn_grad_finalize_kernel(const float* partial_dy, const float* partial_dyx, int64_t slabs,
                            int64_t m, int64_t channels, const float* gamma, const float* invstd,
                            float* dgamma, float* dbeta, float* coef) {
  const int64_t c = blockIdx.x;
  Sums v;
  for (int64_t s = threadIdx.x; s < slabs; s += kFinalizeThreads) {
    v.a += partial_dy[s * channels + c];
    v.b += partial_dyx[s * channels + c];
  }
  v = fold_block(v, [](const Sums& x, const Sums& y) { return Sums{x.a + y.a, x.b + y.b}; });
  if (threadIdx.x != 0) return;
  const double a = v.a, b = v.b;
  dbeta[c] = static_cast<float>(dbeta[c] + a);
  dgamma[c] = static_cast<float>(dgamma[c] + b);
  const double md = static_cast<double>(m);
  coef[c] = static_cast<float>(static_cast<double>(gamma[c]) * invstd[c]);
  coef[channels + c] = static_cast<float>(a / md);
  coef[2 * channels + c] = static_cast<float>(b / md);
}

template <int V, Mask M, typename T>
__global__ void __launch_bounds__(kBnThreads)
    bn_dx_kernel(T* dx, const T* dy, const T* y, const T* x, int64_t m, int64_t channels,
                 int64_t slab_rows, const float* mean, const float* invstd, const float* gamma,
                 const float* beta, const float* coef) {
  using G = Geometry<V>;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * slab_rows;
  const int64_t r1 = std::min(m, r0 + slab_rows);
  const int64_t c = static_cast<int64_t>(blockIdx.y) * G::kTile + static_cast<int64_t>(tx) * V;
  if (c >= channels) return;
  float mu[V], is[V], kk[V], ka[V], kb[V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
    mu[k] = __ldg(mean + c + k);
    is[k] = __ldg(invstd + c + k);
    kk[k] = __ldg(coef + c + k);
    ka[k] = __ldg(coef + channels + c + k);
    kb[k] = __ldg(coef + 2 * channels + c + k);
  }
  const Affine<V> af = load_affine<V, M>(invstd, gamma, beta, c);
#pragma unroll 4
  for (int64_t r = r0 + ty; r < r1; r += G::kTy) {
    float g[V], v[V];
    load_floats<V>(v, x + r * channels + c);  // first: Mask::x masks dy with it
    load_grad<V, M>(g, dy + r * channels, y + r * channels, v, mu, af, c);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float xhat = (v[k] - mu[k]) * is[k];
      g[k] = kk[k] * ((g[k] - ka[k]) - xhat * kb[k]);
    }
    store_floats<V>(dx + r * channels + c, g);
  }
}

// ---- launch ----

struct Extent {
  int64_t m = 0;  // rows: N * H * W
  int64_t c = 0;  // channels
};

Extent extent_of(const Tensor& x) {
  const Dims4 d = dims4(x.shape(), Layout::nhwc);
  return {d.n * d.h * d.w, d.c};
}

// Calls f(std::integral_constant<int, V>{}) with V = 16 / sizeof(T) when C is a multiple of it
// and every pointer is 16-byte aligned (then every row start is), else V = 1.
template <typename T, typename F>
void visit_width(int64_t c, std::initializer_list<const void*> ptrs, F&& f) {
  constexpr int kV = 16 / sizeof(T);
  bool vec = c % kV == 0;
  for (const void* p : ptrs) vec = vec && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  if (vec) return f(std::integral_constant<int, kV>{});
  return f(std::integral_constant<int, 1>{});
}

const float* cf(const Tensor& t) { return static_cast<const float*>(t.data()); }
float* mf(const Tensor& t) { return t.defined() ? static_cast<float*>(t.data()) : nullptr; }

unsigned channel_grid(int64_t c) {
  return static_cast<unsigned>(c);  // one finalize block per channel
}

// Both training forwards: the statistics (from x, or from the given sums), then the normalize
// pass.
void forward_train(const Tensor& y, const BatchNormSaved& saved, const BatchNormRunning& running,
                   const BatchNormInput& in, const BatchNormSums& sums, const BatchNormParams& p) {
  const Tensor &save_mean = saved.mean, &save_invstd = saved.invstd;
  const Tensor &running_mean = running.mean, &running_var = running.var;
  const Tensor &x = in.x, &gamma = in.gamma, &beta = in.beta, &residual = in.residual;
  const Tensor &sum = sums.sum, &sum_sq = sums.sum_sq;
  const Device d = x.device();
  const Extent e = extent_of(x);
  if (e.m == 0 || e.c == 0) return;
  const cudaStream_t stream = core::cuda_stream(d);
  const bool from_sums = sum.defined();
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.data());
    T* py = static_cast<T*>(y.data());
    // Without a residual the kernels never touch pr (x stands in).
    const T* pr = residual.defined() ? static_cast<const T*>(residual.data()) : px;
    visit_width<T>(e.c, {px, py, pr}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      using G = Geometry<V>;
      const int64_t tiles = (e.c + G::kTile - 1) / G::kTile;
      STOKER_CHECK(tiles <= 65535, "internal: batchnorm NHWC with ", e.c, " channels");
      const Slabs s = plan_slabs(e.m, tiles);
      // [partial mean | partial M2 | scale]; from sums only the scale.
      const int64_t partials = from_sums ? 0 : 2 * s.count * e.c;
      const Tensor scratch = Tensor::empty({partials + e.c}, DType::f32, d);
      float* pm = static_cast<float*>(scratch.data());
      float* pq = pm + s.count * e.c;
      float* scale = pm + partials;
      const dim3 grid(static_cast<unsigned>(s.count), static_cast<unsigned>(tiles));
      const dim3 block(G::kTx, G::kTy);
      if (from_sums) {
        const auto blocks = static_cast<unsigned>((e.c + kBlockSize - 1) / kBlockSize);
        bn_sums_finalize_kernel<<<blocks, kBlockSize, 0, stream>>>(
            cf(sum), cf(sum_sq), e.m, e.c, cf(gamma), p.eps, p.momentum, mf(save_mean),
            mf(save_invstd), mf(running_mean), mf(running_var), scale);
        STOKER_CUDA_CHECK(cudaGetLastError());
      } else {
        bn_stats_kernel<V><<<grid, block, 0, stream>>>(px, e.m, e.c, s.rows, pm, pq);
        STOKER_CUDA_CHECK(cudaGetLastError());
        bn_stats_finalize_kernel<<<channel_grid(e.c), kFinalizeThreads, 0, stream>>>(
            pm, pq, s.count, s.rows, e.m, e.c, cf(gamma), p.eps, p.momentum, mf(save_mean),
            mf(save_invstd), mf(running_mean), mf(running_var), scale);
        STOKER_CUDA_CHECK(cudaGetLastError());
      }
      const bool res = residual.defined();
      const auto normalize = p.relu ? (res ? bn_normalize_kernel<V, true, true, T>
                                           : bn_normalize_kernel<V, true, false, T>)
                                    : (res ? bn_normalize_kernel<V, false, true, T>
                                           : bn_normalize_kernel<V, false, false, T>);
      normalize<<<grid, block, 0, stream>>>(py, px, pr, e.m, e.c, s.rows, cf(save_mean), scale,
                                            cf(beta));
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace

void batchnorm_nhwc_forward_train(const Tensor& y, const BatchNormSaved& saved,
                                  const BatchNormRunning& running, const BatchNormInput& in,
                                  const BatchNormParams& p) {
  forward_train(y, saved, running, in, BatchNormSums(), p);
}

void batchnorm_nhwc_forward_train_from_sums(const Tensor& y, const BatchNormSaved& saved,
                                            const BatchNormRunning& running,
                                            const BatchNormInput& in, const BatchNormSums& sums,
                                            const BatchNormParams& p) {
  forward_train(y, saved, running, in, sums, p);
}

void batchnorm_nhwc_backward(const BatchNormGrads& grads, const Tensor& dy,
                             const BatchNormInput& in, const BatchNormSaved& saved,
                             const BatchNormParams& p, const Tensor& y) {
  const Tensor &dx = grads.dx, &dgamma = grads.dgamma, &dbeta = grads.dbeta;
  const Tensor& dresidual = grads.dresidual;
  const Tensor &x = in.x, &gamma = in.gamma, &beta = in.beta;
  const Tensor &save_mean = saved.mean, &save_invstd = saved.invstd;
  const Device d = x.device();
  const Extent e = extent_of(x);
  if (e.m == 0 || e.c == 0) return;
  const cudaStream_t stream = core::cuda_stream(d);
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* px = static_cast<const T*>(x.data());
    const T* pdy = static_cast<const T*>(dy.data());
    T* pdx = static_cast<T*>(dx.data());
    const bool res = dresidual.defined();
    // The fused ReLU's mask: rebuilt from x given beta (no residual: y depends on x alone), else
    // read from y. Where y is not read the kernels never touch py (x stands in), so y takes no
    // part in the choice of the vector width either.
    const Mask mask = !p.relu                                                      ? Mask::none
                      : ops::batchnorm_backward_reads_y(d, p, beta.defined(), res) ? Mask::y
                                                                                   : Mask::x;
    const T* py = mask == Mask::y ? static_cast<const T*>(y.data()) : px;
    const float* pbeta = mask == Mask::x ? cf(beta) : nullptr;
    // The residual's gradient dz; without it the kernels never touch pdr (dx stands in).
    T* pdr = res ? static_cast<T*>(dresidual.data()) : pdx;
    visit_width<T>(e.c, {px, pdy, pdx, py, pdr}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      using G = Geometry<V>;
      const int64_t tiles = (e.c + G::kTile - 1) / G::kTile;
      STOKER_CHECK(tiles <= 65535, "internal: batchnorm NHWC with ", e.c, " channels");
      const Slabs s = plan_slabs(e.m, tiles);
      // [partial sum dy | partial sum dy * xhat | k | a | b]
      const Tensor scratch = Tensor::empty({2 * s.count * e.c + 3 * e.c}, DType::f32, d);
      float* pa = static_cast<float*>(scratch.data());
      float* pb = pa + s.count * e.c;
      float* coef = pb + s.count * e.c;
      const dim3 grid(static_cast<unsigned>(s.count), static_cast<unsigned>(tiles));
      const dim3 block(G::kTx, G::kTy);
      const auto sums = mask == Mask::x   ? bn_grad_sums_kernel<V, Mask::x, false, T>
                        : mask == Mask::y ? (res ? bn_grad_sums_kernel<V, Mask::y, true, T>
                                                 : bn_grad_sums_kernel<V, Mask::y, false, T>)
                                          : (res ? bn_grad_sums_kernel<V, Mask::none, true, T>
                                                 : bn_grad_sums_kernel<V, Mask::none, false, T>);
      sums<<<grid, block, 0, stream>>>(pdy, py, px, pdr, e.m, e.c, s.rows, cf(save_mean),
                                       cf(save_invstd), cf(gamma), pbeta, pa, pb);
      STOKER_CUDA_CHECK(cudaGetLastError());
      bn_grad_finalize_kernel<<<channel_grid(e.c), kFinalizeThreads, 0, stream>>>(
          pa, pb, s.count, e.m, e.c, cf(gamma), cf(save_invstd), mf(dgamma), mf(dbeta), coef);
      STOKER_CUDA_CHECK(cudaGetLastError());
      // With the residual, the dx pass reads the stored dz instead of masking dy again.
      const auto dx_pass = res || mask == Mask::none ? bn_dx_kernel<V, Mask::none, T>
                           : mask == Mask::x         ? bn_dx_kernel<V, Mask::x, T>
                                                     : bn_dx_kernel<V, Mask::y, T>;
      dx_pass<<<grid, block, 0, stream>>>(pdx, res ? pdr : pdy, py, px, e.m, e.c, s.rows,
                                          cf(save_mean), cf(save_invstd), cf(gamma), pbeta, coef);
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace stoker::ops::cuda
