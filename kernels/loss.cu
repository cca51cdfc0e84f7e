// CUDA softmax cross-entropy (fused, label smoothing, ignore_index) and mean squared error.
//
// Cross-entropy forward: one row group per row reads the logits ONCE, keeping an online
// log-sum-exp (running max m and sum s of exp(x - m), rescaled per 16-byte pack when the max
// grows) and the sum of
// the logits (for the smoothing term); lanes are merged with a fixed butterfly whose merge is
// exactly commutative (products with __fmul_rn, so no lane fuses differently). Each block folds
// its rows' losses and counts in a fixed order into one partial, and a one-block kernel folds
// the partials in index order into loss = sum / count and count: both stay on the device (no
// host sync) and the grid depends only on (N, C), so the loss has the same bits on every run.
// A target outside [0, C) that is not ignore_index makes its row loss NaN (so the loss is NaN);
// counts are integers until the final division.
// Backward: one row group per row, dlogits = scale / count * (exp(x - lse) - (1-s) onehot - s/C),
// count read from the device scalar; ignored rows are zeros, bad targets NaN rows.
// Both take rows of `ld` elements of which the first `c` are classes (a padded head: ld rounded
// up so that every row starts on 16 bytes and the Pack path runs); the forward never reads the
// padding, the backward writes it as zeros.
//
// MSE forward: grid-stride squared differences, per-block partials, one ordered final fold.
// MSE backward: the shared ops/nn_math.h expression through kernel_util's map kernel: the CPU's
// bits.
#include <cmath>
#include <limits>

#include "kernel_util.cuh"
#include "nn_util.cuh"
#include "ops/loss_stubs.h"
#include "ops/nn_math.h"

namespace stoker::ops::cuda {

namespace {

constexpr int kMaxPartials = 1024;  // blocks of the reduction kernels (a function of N only)

// Online log-sum-exp state plus the plain sum of the logits.
struct LseAcc {
  float m;   // running max (-inf before any element)
  float s;   // sum of exp(x - m)
  float sx;  // sum of x
};

__device__ STOKER_FORCEINLINE LseAcc shfl_xor(LseAcc v, int o) {
  return {__shfl_xor_sync(~0u, v.m, o), __shfl_xor_sync(~0u, v.s, o),
          __shfl_xor_sync(~0u, v.sx, o)};
}

struct LseMerge {
  __device__ STOKER_FORCEINLINE LseAcc operator()(const LseAcc& a, const LseAcc& b) const {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, __fadd_rn(a.s, b.s), __fadd_rn(a.sx, b.sx)};
    const float s = __fadd_rn(__fmul_rn(a.s, expf(a.m - m)), __fmul_rn(b.s, expf(b.m - m)));
    return {m, s, __fadd_rn(a.sx, b.sx)};
  }
};

__device__ STOKER_FORCEINLINE void lse_add(LseAcc& a, float v) {
  if (v > a.m) {
    a.s = fmaf(a.s, expf(a.m - v), 1.0f);
    a.m = v;
  } else if (v != -INFINITY) {  // -inf adds nothing; NaN (never > m) makes s NaN
    a.s += expf(v - a.m);
  }
  a.sx += v;
}

// A whole pack at once: one rescale per pack (when its max exceeds the running max) instead of
// a compare and branch per element, and the pack's exps summed as a tree. What made the
// per-element form compute-bound at ~1.1 TB/s was the dependent chain through `a.s`.
template <int V>
__device__ STOKER_FORCEINLINE void lse_add_pack(LseAcc& a, const float (&v)[V]) {
  float pm = v[0], sx = v[0];
#pragma unroll
  for (int k = 1; k < V; ++k) {
    pm = fmaxf(pm, v[k]);  // NaN is skipped here; it reaches s through expf(NaN - m) below
    sx += v[k];
  }
  a.sx += sx;
  if (pm > a.m) {
    a.s = a.m == -INFINITY ? 0.0f : a.s * expf(a.m - pm);
    a.m = pm;
  }
  if (a.m == -INFINITY) {  // every value so far is -inf (or NaN: sx carries it)
    return;
  }
  float e[V];
#pragma unroll
  for (int k = 0; k < V; ++k) e[k] = expf(v[k] - a.m);  // -inf - m = -inf: exp gives 0
#pragma unroll
  for (int w = 1; w < V; w *= 2) {
#pragma unroll
    for (int k = 0; k + w < V; k += 2 * w) e[k] += e[k + w];
  }
  a.s += e[0];
}

template <typename I>
__device__ STOKER_FORCEINLINE bool valid_class(I t, int64_t c) {
  return static_cast<int64_t>(t) >= 0 && static_cast<int64_t>(t) < c;
}

template <int kThreads, int V, typename T, typename I>
__global__ void __launch_bounds__(kRowBlock)
    xent_forward_kernel(float* lse, float* partial_loss, unsigned* partial_count, const T* logits,
                        const I* target, int64_t n, int64_t ld, int64_t c, int64_t ignore_index,
                        float smoothing) {
  __shared__ LseAcc smem[kRowBlock / 32];
  __shared__ float block_loss[kRowBlock / 32];
  __shared__ unsigned block_count[kRowBlock / 32];
  constexpr int kRowsPerBlock = kRowBlock / kThreads;
  const int lane = threadIdx.x % kThreads;
  const float inv_c = 1.0f / static_cast<float>(c);
  float loss_acc = 0.0f;  // meaningful in lane 0 of each group
  unsigned count_acc = 0;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreads; r < n;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const T* xr = logits + r * ld;
    LseAcc acc{-INFINITY, 0.0f, 0.0f};
    const int64_t packs = c / V;
    for (int64_t p = lane; p < packs; p += kThreads) {
      const Pack<T, V> pk = load_pack<V>(xr + p * V);
      float v[V];
#pragma unroll
      for (int k = 0; k < V; ++k) v[k] = to_float(pk.v[k]);
      lse_add_pack<V>(acc, v);
    }
    for (int64_t j = packs * V + lane; j < c; j += kThreads) lse_add(acc, to_float(xr[j]));
    acc = group_reduce<kThreads>(acc, LseMerge{}, smem);
    const float l = acc.m + logf(acc.s);
    if (lane != 0) continue;
    lse[r] = l;
    const I t = target[r];
    if (static_cast<int64_t>(t) == ignore_index) continue;
    float row_loss = std::numeric_limits<float>::quiet_NaN();
    if (valid_class(t, c)) {
      const float xt = to_float(xr[static_cast<int64_t>(t)]);
      row_loss = fmaf(1.0f - smoothing, l - xt, smoothing * (l - acc.sx * inv_c));
    }
    loss_acc += row_loss;
    count_acc += 1;
  }
  if (threadIdx.x % 32 == 0) {
    block_loss[threadIdx.x / 32] = loss_acc;
    block_count[threadIdx.x / 32] = count_acc;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  float total = block_loss[0];
  unsigned count = block_count[0];
  for (int w = 1; w < kRowBlock / 32; ++w) {
    total += block_loss[w];
    count += block_count[w];
  }
  partial_loss[blockIdx.x] = total;
  partial_count[blockIdx.x] = count;
}

// loss = sum(partial_loss) / sum(partial_count), count = sum(partial_count); one block, fixed
// order. With `partial_count` null the divisor is `denominator` (MSE). With `divide_by` set (a
// chunk of a chunked cross-entropy): loss += sum(partial_loss) / *divide_by, count untouched.
__global__ void __launch_bounds__(kRowBlock)
    mean_finish_kernel(float* loss, float* count, const float* partial_loss,
                       const unsigned* partial_count, int partials, double denominator,
                       const float* divide_by = nullptr) {
  __shared__ float smem[kRowBlock / 32];
  __shared__ unsigned csmem[kRowBlock / 32];
  float s = 0.0f;
  unsigned k = 0;
  for (int i = threadIdx.x; i < partials; i += kRowBlock) {
    s += partial_loss[i];
    if (partial_count != nullptr) k += partial_count[i];
  }
  s = group_reduce<kRowBlock>(s, SumOp{}, smem);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) k += __shfl_xor_sync(~0u, k, o);
  if (threadIdx.x % 32 == 0) csmem[threadIdx.x / 32] = k;
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (divide_by != nullptr) {
    *loss += s / *divide_by;
    return;
  }
  if (partial_count == nullptr) {
    *loss = static_cast<float>(static_cast<double>(s) / denominator);
    return;
  }
  unsigned total = 0;
  for (int w = 0; w < kRowBlock / 32; ++w) total += csmem[w];
  *loss = s / static_cast<float>(total);  // 0 / 0 = NaN when every row is ignored
  *count = static_cast<float>(total);
}

template <int kThreads, int V, typename T, typename I>
__global__ void __launch_bounds__(kRowBlock)
    xent_backward_kernel(T* dlogits, const T* logits, const I* target, const float* lse,
                         const float* count, int64_t n, int64_t ld, int64_t c, int64_t ignore_index,
                         float smoothing, float scale, const float* grad_scale) {
  constexpr int kRowsPerBlock = kRowBlock / kThreads;
  const int lane = threadIdx.x % kThreads;
  const float factor = (grad_scale ? scale * __ldg(grad_scale) : scale) / __ldg(count);
  const float off = smoothing / static_cast<float>(c);  // target mass of every class
  const float on = (1.0f - smoothing) + off;            // ... and of the labelled class
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreads; r < n;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    T* dr = dlogits + r * ld;
    const I t = __ldg(target + r);
    if (static_cast<int64_t>(t) == ignore_index) {
      row_fill<kThreads, V>(dr, ld, lane, 0.0f);
      continue;
    }
    if (!valid_class(t, c)) {
      row_fill<kThreads, V>(dr, ld, lane, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const float l = __ldg(lse + r);
    const int64_t tc = static_cast<int64_t>(t);
    // The whole padded row in Packs; a padding column's gradient is 0 (its logit is not read
    // into the result, so even a NaN there stays out).
    row_map<kThreads, V>(dr, logits + r * ld, ld, lane, [&](int64_t j, float v) {
      return j < c ? (expf(v - l) - (j == tc ? on : off)) * factor : 0.0f;
    });
  }
}

// count = the number of targets != ignore_index; one block (the targets of one batch are few).
template <typename I>
__global__ void __launch_bounds__(kRowBlock)
    count_targets_kernel(float* count, const I* target, int64_t n, int64_t ignore_index) {
  __shared__ unsigned smem[kRowBlock / 32];
  unsigned k = 0;
  for (int64_t i = threadIdx.x; i < n; i += kRowBlock)
    k += static_cast<int64_t>(target[i]) != ignore_index;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) k += __shfl_xor_sync(~0u, k, o);
  if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = k;
  __syncthreads();
  if (threadIdx.x != 0) return;
  unsigned total = 0;
  for (int w = 0; w < kRowBlock / 32; ++w) total += smem[w];
  *count = static_cast<float>(total);
}

template <typename F>
void visit_targets(const Tensor& target, F&& f) {
  if (target.dtype() == DType::i32) {
    f(static_cast<const int32_t*>(target.data()));
  } else {
    f(static_cast<const int64_t*>(target.data()));
  }
}

// Sum of (p - t)^2 per block: Packs over [head, head + packs * V), scalars elsewhere.
template <int V, typename T>
__global__ void __launch_bounds__(kRowBlock)
    mse_partials_kernel(float* partials, const T* pred, const T* target, int64_t n, int64_t head,
                        int64_t packs) {
  __shared__ float smem[kRowBlock / 32];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  float acc = 0.0f;
  for (int64_t p = tid; p < packs; p += stride) {
    const Pack<T, V> a = load_pack<V>(pred + head + p * V);
    const Pack<T, V> b = load_pack<V>(target + head + p * V);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float d = to_float(a.v[k]) - to_float(b.v[k]);
      acc = fmaf(d, d, acc);
    }
  }
  const int64_t body_end = head + packs * V;
  for (int64_t j = tid; j < n - packs * V; j += stride) {
    const int64_t i = scalar_index(j, head, body_end);
    const float d = to_float(pred[i]) - to_float(target[i]);
    acc = fmaf(d, d, acc);
  }
  acc = group_reduce<kRowBlock>(acc, SumOp{}, smem);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

struct MseGradOp {  // op(pred, target)
  float k;
  const float* grad_scale;  // optional device factor on k (fp16 loss scale)
  __device__ float operator()(float p, float t) const {
    return detail::mse_grad(p, t, grad_scale ? k * __ldg(grad_scale) : k);
  }
};

}  // namespace

void cross_entropy_forward(const Tensor& loss, const Tensor& count, const Tensor& lse,
                           const Tensor& logits, const Tensor& target, int64_t ignore_index,
                           float label_smoothing, const Tensor& divide_by, int64_t classes) {
  const core::Device device = logits.device();
  const core::DeviceScope scope(device.index);
  const int64_t n = logits.size(0), ld = logits.size(1), c = classes;
  const cudaStream_t stream = core::cuda_stream(device);
  const unsigned grid = row_grid(n, wide_rows(c) ? kRowBlock : 32, kMaxPartials);
  // Scratch: [grid] f32 partial losses, then [grid] u32 partial counts (pool memory, released
  // on this stream after the kernels).
  const Tensor scratch = Tensor::empty({2 * static_cast<int64_t>(grid)}, DType::f32, device);
  float* partial_loss = static_cast<float*>(scratch.data());
  unsigned* partial_count = reinterpret_cast<unsigned*>(partial_loss + grid);
  visit_targets(target, [&](const auto* t) {
    visit_float(logits.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const bool vec = rows_aligned(logits.data(), ld, sizeof(T));
      visit_row_config(c, vec, [&](auto threads, auto use_vec) {
        constexpr int kThreads = decltype(threads)::value;
        constexpr int V = decltype(use_vec)::value ? 16 / sizeof(T) : 1;
        xent_forward_kernel<kThreads, V><<<grid, kRowBlock, 0, stream>>>(
            static_cast<float*>(lse.data()), partial_loss, partial_count,
            static_cast<const T*>(logits.data()), t, n, ld, c, ignore_index, label_smoothing);
        STOKER_CUDA_CHECK(cudaGetLastError());
      });
    });
  });
  mean_finish_kernel<<<1, kRowBlock, 0, stream>>>(
      static_cast<float*>(loss.data()),
      divide_by.defined() ? nullptr : static_cast<float*>(count.data()), partial_loss,
      partial_count, static_cast<int>(grid), 0.0,
      divide_by.defined() ? static_cast<const float*>(divide_by.data()) : nullptr);
  STOKER_CUDA_CHECK(cudaGetLastError());
}

void count_targets(const Tensor& count, const Tensor& target, int64_t ignore_index) {
  const core::Device device = target.device();
  const core::DeviceScope scope(device.index);
  const cudaStream_t stream = core::cuda_stream(device);
  visit_targets(target, [&](const auto* t) {
    count_targets_kernel<<<1, kRowBlock, 0, stream>>>(static_cast<float*>(count.data()), t,
                                                      target.numel(), ignore_index);
    STOKER_CUDA_CHECK(cudaGetLastError());
  });
}

void cross_entropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& target,
                            const Tensor& lse, const Tensor& count, int64_t ignore_index,
                            float label_smoothing, float scale, const Tensor& grad_scale,
                            int64_t classes) {
  const core::Device device = logits.device();
  const core::DeviceScope scope(device.index);
  const int64_t n = logits.size(0), ld = logits.size(1), c = classes;
  const cudaStream_t stream = core::cuda_stream(device);
  visit_targets(target, [&](const auto* t) {
    visit_float(logits.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const bool vec =
          rows_aligned(logits.data(), ld, sizeof(T)) && rows_aligned(dlogits.data(), ld, sizeof(T));
      visit_row_config(ld, vec, [&](auto threads, auto use_vec) {
        constexpr int kThreads = decltype(threads)::value;
        constexpr int V = decltype(use_vec)::value ? 16 / sizeof(T) : 1;
        const unsigned grid = row_grid(n, kThreads, int64_t{sm_count(device.index)} * kBlocksPerSm);
        xent_backward_kernel<kThreads, V><<<grid, kRowBlock, 0, stream>>>(
            static_cast<T*>(dlogits.data()), static_cast<const T*>(logits.data()), t,
            static_cast<const float*>(lse.data()), static_cast<const float*>(count.data()), n, ld,
            c, ignore_index, label_smoothing, scale,
            grad_scale.defined() ? static_cast<const float*>(grad_scale.data()) : nullptr);
        STOKER_CUDA_CHECK(cudaGetLastError());
      });
    });
  });
}

void mse_forward(const Tensor& loss, const Tensor& pred, const Tensor& target) {
  const core::Device device = pred.device();
  const core::DeviceScope scope(device.index);
  const int64_t n = pred.numel();
  const cudaStream_t stream = core::cuda_stream(device);
  const unsigned grid = static_cast<unsigned>(
      std::clamp<int64_t>((n + 4 * kRowBlock - 1) / (4 * kRowBlock), 1, kMaxPartials));
  const Tensor scratch = Tensor::empty({static_cast<int64_t>(grid)}, DType::f32, device);
  float* partials = static_cast<float*>(scratch.data());
  visit_float(pred.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    const T* p = static_cast<const T*>(pred.data());
    const T* t = static_cast<const T*>(target.data());
    const VectorPlan plan = plan_vectors<V>(n, {{p, sizeof(T)}, {t, sizeof(T)}});
    mse_partials_kernel<V>
        <<<grid, kRowBlock, 0, stream>>>(partials, p, t, n, plan.head, plan.packs);
    STOKER_CUDA_CHECK(cudaGetLastError());
  });
  mean_finish_kernel<<<1, kRowBlock, 0, stream>>>(static_cast<float*>(loss.data()), nullptr,
                                                  partials, nullptr, static_cast<int>(grid),
                                                  static_cast<double>(n));
  STOKER_CUDA_CHECK(cudaGetLastError());
}

void mse_backward(const Tensor& dpred, const Tensor& pred, const Tensor& target, float scale,
                  const Tensor& grad_scale) {
  const core::DeviceScope scope(pred.device().index);
  const float k = detail::mse_grad_factor(scale, pred.numel());
  visit_float(pred.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map(pred.device(), static_cast<T*>(dpred.data()), static_cast<const T*>(pred.data()),
               static_cast<const T*>(target.data()), pred.numel(),
               MseGradOp{k, grad_scale.defined() ? static_cast<const float*>(grad_scale.data())
                                                 : nullptr});
  });
}

STOKER_REGISTER_STUB(cross_entropy_forward, cross_entropy_forward);
STOKER_REGISTER_STUB(count_targets, count_targets);
STOKER_REGISTER_STUB(cross_entropy_backward, cross_entropy_backward);
STOKER_REGISTER_STUB(mse_forward, mse_forward);
STOKER_REGISTER_STUB(mse_backward, mse_backward);

}  // namespace stoker::ops::cuda
