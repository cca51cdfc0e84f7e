// CUDA layer normalization over the last dimension, fp32 statistics and math.
//
// Forward: one row group (a warp, or the block for rows wider than 2048) per row. Two-pass
// statistics — the mean, then the centred sum of squares — avoid the cancellation of
// E[x^2] - E[x]^2; the later passes re-read the row from L1/L2, so HBM sees x once and y once.
// rstd is 1 / sqrtf(var + eps) (IEEE sqrt and division, not rsqrtf).
// Backward, with xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      one row group per row, two passes
//   dgamma += sum_rows dy * xhat, dbeta += sum_rows dy    deterministic column sums
// The parameter gradients are a separate column-sum launch (nn_util.cuh: per row-chunk
// partials, then an ordered add into dgamma/dbeta), not atomics, so they are bitwise
// reproducible; it re-reads dy and x, which costs one extra pass but keeps the row kernel free
// of per-column state.
//
// The fused add_layernorm_* are the same kernels with kAdd set. Forward: the first pass loads
// x and residual, stores the rounded sum and accumulates it (in the order the plain first pass
// visits the row); the later passes re-read the sum row this thread has just written (its own
// stores: plain loads, never the read-only path), so HBM sees x, residual, sum and y once each.
// Backward: the second pass also loads dsum_in and returns rounded(dx) + dsum_in. With the same
// row group and the same Pack width as the plain op on the same data, the results have its bits:
// when the fused op's tensors disagree on 16-byte alignment in a way that would change the
// width, it runs the unfused pair instead (not expected in practice: pool memory is aligned).
#include "kernel_util.cuh"
#include "nn_util.cuh"
#include "ops/elementwise_stubs.h"
#include "ops/layernorm_stubs.h"

namespace stoker::ops::cuda {

namespace {

// kAdd: sum = x + residual first, and the row normalized is sum's.
template <int kThreads, int V, bool kAdd, typename T>
__global__ void __launch_bounds__(kRowBlock)
    layernorm_forward_kernel(T* y, T* sum, float* mean, float* rstd, const T* x, const T* residual,
                             const float* gamma, const float* beta, int64_t n, int64_t c,
                             float eps) {
  __shared__ float smem[kRowBlock / 32];
  constexpr int kRowsPerBlock = kRowBlock / kThreads;
  const int lane = threadIdx.x % kThreads;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreads; r < n;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const T* xr = x + r * c;
    float s = 0.0f;
    if constexpr (kAdd) {
      T* sr = sum + r * c;
      row_map2<kThreads, V>(sr, xr, residual + r * c, c, lane, [&](int64_t, float a, float b) {
        const float v = to_float(from_float<T>(a + b));  // the sum as stored (ops::add's bits)
        s += v;
        return v;
      });
      xr = sr;
    } else {
      row_visit<kThreads, V>(xr, c, lane, [&](int64_t, float v) { s += v; });
    }
    const float mu = group_reduce<kThreads>(s, SumOp{}, smem) * inv_c;
    float q = 0.0f;
    row_visit<kThreads, V>(xr, c, lane, [&](int64_t, float v) {
      const float d = v - mu;
      q = fmaf(d, d, q);
    });
    const float var = group_reduce<kThreads>(q, SumOp{}, smem) * inv_c;
    const float rs = 1.0f / sqrtf(var + eps);
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
    row_map<kThreads, V>(y + r * c, xr, c, lane, [&](int64_t j, float v) {
      return fmaf((v - mu) * rs, __ldg(gamma + j), __ldg(beta + j));
    });
  }
}

// kAdd: dx = rounded(dx) + add (the fused backward's dsum_in). dx may alias dy and add: each
// element is read by the thread that writes it, before it writes it.
template <int kThreads, int V, bool kAdd, typename T>
__global__ void __launch_bounds__(kRowBlock)
    layernorm_backward_kernel(T* dx, const T* dy, const T* x, const T* add, const float* mean,
                              const float* rstd, const float* gamma, int64_t n, int64_t c) {
  __shared__ float2 smem[kRowBlock / 32];
  constexpr int kRowsPerBlock = kRowBlock / kThreads;
  const int lane = threadIdx.x % kThreads;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreads; r < n;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const T* gr = dy + r * c;
    const T* xr = x + r * c;
    const float mu = __ldg(mean + r), rs = __ldg(rstd + r);
    float2 acc = make_float2(0.0f, 0.0f);  // sum g, sum g * xhat
    // g * gamma is rounded the same way (__fmul_rn, never fused) in both passes, so for C = 1
    // g - mean(g) is exactly 0, as it is mathematically for any row's centred sum.
    row_visit2<kThreads, V>(gr, xr, c, lane, [&](int64_t j, float g, float v) {
      const float gg = __fmul_rn(g, __ldg(gamma + j));
      acc.x += gg;
      acc.y = fmaf(gg, (v - mu) * rs, acc.y);
    });
    const float2 sums = group_reduce<kThreads>(acc, Sum2Op{}, smem);
    const float a = sums.x * inv_c, b = sums.y * inv_c;
    const auto grad = [&](int64_t j, float g, float v) {
      const float xhat = (v - mu) * rs;
      return rs * ((__fmul_rn(g, __ldg(gamma + j)) - a) - xhat * b);
    };
    if constexpr (kAdd) {
      row_map3<kThreads, V>(dx + r * c, gr, xr, add + r * c, c, lane,
                            [&](int64_t j, float g, float v, float d) {
                              // __fadd_rn: never contracted into an fma with grad's last
                              // multiply (f32), so the sum is rounded(dx) + d, as unfused.
                              return __fadd_rn(to_float(from_float<T>(grad(j, g, v))), d);
                            });
    } else {
      row_map2<kThreads, V>(dx + r * c, gr, xr, c, lane, grad);
    }
  }
}

// (dy * xhat, dy) of elements (r, j .. j + V - 1), for the dgamma / dbeta column sums.
template <typename T>
struct LayerNormParamGradSrc {
  const T* dy;
  const T* x;
  const float* mean;
  const float* rstd;
  int64_t c;
  template <int V>
  __device__ STOKER_FORCEINLINE void load(int64_t r, int64_t j, float (&v)[2][V]) const {
    float g[V], xv[V];
    load_floats<V>(g, dy + r * c + j);
    load_floats<V>(xv, x + r * c + j);
    const float mu = __ldg(mean + r), rs = __ldg(rstd + r);
#pragma unroll
    for (int q = 0; q < V; ++q) {
      v[0][q] = g[q] * ((xv[q] - mu) * rs);
      v[1][q] = g[q];
    }
  }
};

// layernorm_forward (sum and residual null) or add_layernorm_forward; `vec`: the Pack path.
template <bool kAdd>
void launch_forward(const Tensor& y, const Tensor* sum, const Tensor& mean, const Tensor& rstd,
                    const Tensor& x, const Tensor* residual, const Tensor& gamma,
                    const Tensor& beta, float eps, bool vec) {
  const int64_t c = gamma.numel();
  const int64_t n = x.numel() / c;
  const cudaStream_t stream = core::cuda_stream(x.device());
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_row_config(c, vec, [&](auto threads, auto use_vec) {
      constexpr int kThreads = decltype(threads)::value;
      constexpr int V = decltype(use_vec)::value ? 16 / sizeof(T) : 1;
      const unsigned grid =
          row_grid(n, kThreads, int64_t{sm_count(x.device().index)} * kBlocksPerSm);
      layernorm_forward_kernel<kThreads, V, kAdd><<<grid, kRowBlock, 0, stream>>>(
          static_cast<T*>(y.data()), sum ? static_cast<T*>(sum->data()) : nullptr,
          static_cast<float*>(mean.data()), static_cast<float*>(rstd.data()),
          static_cast<const T*>(x.data()),
          residual ? static_cast<const T*>(residual->data()) : nullptr,
          static_cast<const float*>(gamma.data()), static_cast<const float*>(beta.data()), n, c,
          eps);
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

// layernorm_backward (add null) or add_layernorm_backward; `vec`: the Pack path.
template <bool kAdd>
void launch_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& dy,
                     const Tensor* add, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                     const Tensor& gamma, bool vec) {
  const int64_t c = gamma.numel();
  const int64_t n = x.numel() / c;
  const cudaStream_t stream = core::cuda_stream(x.device());
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pdy = static_cast<const T*>(dy.data());
    const T* px = static_cast<const T*>(x.data());
    const float* pm = static_cast<const float*>(mean.data());
    const float* pr = static_cast<const float*>(rstd.data());
    // Parameter gradients first: dx may alias dy (the row kernel reads a row before writing it,
    // but the column sums read every row).
    const LayerNormParamGradSrc<T> src{pdy, px, pm, pr, c};
    const ColumnOut<2> sums{
        {static_cast<float*>(dgamma.data()), static_cast<float*>(dbeta.data())}};
    if (rows_aligned(pdy, c, sizeof(T)) && rows_aligned(px, c, sizeof(T))) {
      launch_column_sums<2, 16 / sizeof(T)>(x.device(), src, n, c, sums);
    } else {
      launch_column_sums<2, 1>(x.device(), src, n, c, sums);
    }
    visit_row_config(c, vec, [&](auto threads, auto use_vec) {
      constexpr int kThreads = decltype(threads)::value;
      constexpr int V = decltype(use_vec)::value ? 16 / sizeof(T) : 1;
      const unsigned grid =
          row_grid(n, kThreads, int64_t{sm_count(x.device().index)} * kBlocksPerSm);
      layernorm_backward_kernel<kThreads, V, kAdd><<<grid, kRowBlock, 0, stream>>>(
          static_cast<T*>(dx.data()), pdy, px, add ? static_cast<const T*>(add->data()) : nullptr,
          pm, pr, static_cast<const float*>(gamma.data()), n, c);
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

bool aligned_rows(const Tensor& t, int64_t c) {
  return rows_aligned(t.data(), c, dtype_size(t.dtype()));
}

}  // namespace

void layernorm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& gamma, const Tensor& beta, float eps) {
  const core::DeviceScope scope(x.device().index);
  const int64_t c = gamma.numel();
  const bool vec = aligned_rows(x, c) && aligned_rows(y, c);
  launch_forward<false>(y, nullptr, mean, rstd, x, nullptr, gamma, beta, eps, vec);
}

void layernorm_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& gamma) {
  const core::DeviceScope scope(x.device().index);
  const int64_t c = gamma.numel();
  const bool vec = aligned_rows(dx, c) && aligned_rows(dy, c) && aligned_rows(x, c);
  launch_backward<false>(dx, dgamma, dbeta, dy, nullptr, x, mean, rstd, gamma, vec);
}

void add_layernorm_forward(const Tensor& y, const Tensor& sum, const Tensor& mean,
                           const Tensor& rstd, const Tensor& x, const Tensor& residual,
                           const Tensor& gamma, const Tensor& beta, float eps) {
  const core::DeviceScope scope(x.device().index);
  const int64_t c = gamma.numel();
  // layernorm_forward on (sum, y) would take the Pack path iff both are aligned.
  const bool out_vec = aligned_rows(sum, c) && aligned_rows(y, c);
  const bool in_vec = aligned_rows(x, c) && aligned_rows(residual, c);
  if (out_vec && !in_vec) {  // the Pack width of the plain op, which the inputs cannot take
    add_impl(sum, x, residual);
    layernorm_forward(y, mean, rstd, sum, gamma, beta, eps);
    return;
  }
  launch_forward<true>(y, &sum, mean, rstd, x, &residual, gamma, beta, eps, out_vec);
}

void add_layernorm_backward(const Tensor& dsum, const Tensor& dgamma, const Tensor& dbeta,
                            const Tensor& dy, const Tensor& dsum_in, const Tensor& sum,
                            const Tensor& mean, const Tensor& rstd, const Tensor& gamma) {
  const core::DeviceScope scope(sum.device().index);
  const int64_t c = gamma.numel();
  // layernorm_backward into a fresh (aligned) dx would take the Pack path iff dy and sum are.
  const bool in_vec = aligned_rows(dy, c) && aligned_rows(sum, c);
  const bool out_vec = aligned_rows(dsum, c) && aligned_rows(dsum_in, c);
  if (in_vec && !out_vec) {  // the plain op's Pack width, which dsum or dsum_in cannot take
    const Tensor dx = Tensor::empty(sum.shape(), sum.dtype(), sum.device());
    layernorm_backward(dx, dgamma, dbeta, dy, sum, mean, rstd, gamma);
    add_impl(dsum, dx, dsum_in);
    return;
  }
  launch_backward<true>(dsum, dgamma, dbeta, dy, &dsum_in, sum, mean, rstd, gamma, in_vec);
}

STOKER_REGISTER_STUB(layernorm_forward, layernorm_forward);
STOKER_REGISTER_STUB(layernorm_backward, layernorm_backward);
STOKER_REGISTER_STUB(add_layernorm_forward, add_layernorm_forward);
STOKER_REGISTER_STUB(add_layernorm_backward, add_layernorm_backward);

}  // namespace stoker::ops::cuda
