// CUDA RMS normalization over the last dimension (ops/layernorm.h), fp32 statistics and math.
//
// Forward: one row group (a warp, or the block for rows wider than 2048: nn_util.cuh) per row:
// one pass for the sum of squares, then the output pass re-reads the row from L1/L2, so HBM sees
// x once and y once. rstd = 1 / sqrtf(mean + eps) (IEEE sqrt and division); h = x * rstd is
// rounded to the dtype before the weight multiplies (Hugging Face's LlamaRMSNorm), and every
// product is __fmul_rn so nvcc fuses nothing the CPU reference does not.
// Backward, with xn = x * rstd and g = dy * weight:
//   dx = rstd * (g - xn * mean(g * xn))     one row group per row, two passes
//   dweight += sum_rows dy * h              deterministic column sums (nn_util.cuh), no atomics
// The fused add_rmsnorm_* are the same kernels with kAdd: the forward's first pass loads x and
// the residual and stores their rounded sum, which the later pass re-reads (its own stores:
// plain loads); the backward's second pass adds dsum_in to the rounded dx.
#include "kernel_util.cuh"
#include "nn_util.cuh"
#include "ops/rmsnorm_stubs.h"

namespace stoker::ops::cuda {

namespace {

// h as the forward rounds it.
template <typename T>
__device__ STOKER_FORCEINLINE float rounded_h(float v, float rs) {
  return to_float(from_float<T>(__fmul_rn(v, rs)));
}

template <int kThreads, int V, bool kAdd, typename T>
__global__ void __launch_bounds__(kRowBlock)
    rmsnorm_forward_kernel(T* y, T* sum, float* rstd, const T* x, const T* residual,
                           const float* weight, int64_t n, int64_t c, float eps) {
  __shared__ float smem[kRowBlock / 32];
  constexpr int kRowsPerBlock = kRowBlock / kThreads;
  const int lane = threadIdx.x % kThreads;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreads; r < n;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const T* xr = x + r * c;
    float q = 0.0f;
    if constexpr (kAdd) {
      T* sr = sum + r * c;
      row_map2<kThreads, V>(sr, xr, residual + r * c, c, lane, [&](int64_t, float a, float b) {
        const float v = to_float(from_float<T>(a + b));  // the sum as stored (ops::add's bits)
        q = fmaf(v, v, q);
        return v;
      });
      xr = sr;
    } else {
      row_visit<kThreads, V>(xr, c, lane, [&](int64_t, float v) { q = fmaf(v, v, q); });
    }
    const float ms = group_reduce<kThreads>(q, SumOp{}, smem) * inv_c;
    const float rs = 1.0f / sqrtf(ms + eps);
    if (lane == 0) rstd[r] = rs;
    // y may be x itself (plain op): each element is read by the thread that writes it.
    row_map<kThreads, V>(y + r * c, xr, c, lane, [&](int64_t j, float v) {
      return __fmul_rn(__ldg(weight + j), rounded_h<T>(v, rs));
    });
  }
}

// kAdd: dx = rounded(dx) + add. dx may alias dy and add (each element is read by the thread that
// writes it, before it writes it).
template <int kThreads, int V, bool kAdd, typename T>
__global__ void __launch_bounds__(kRowBlock)
    rmsnorm_backward_kernel(T* dx, const T* dy, const T* x, const T* add, const float* rstd,
                            const float* weight, int64_t n, int64_t c) {
  __shared__ float smem[kRowBlock / 32];
  constexpr int kRowsPerBlock = kRowBlock / kThreads;
  const int lane = threadIdx.x % kThreads;
  const float inv_c = 1.0f / static_cast<float>(c);
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreads; r < n;
       r += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const T* gr = dy + r * c;
    const T* xr = x + r * c;
    const float rs = __ldg(rstd + r);
    float dot = 0.0f;  // sum g * xn
    row_visit2<kThreads, V>(gr, xr, c, lane, [&](int64_t j, float g, float v) {
      dot = fmaf(__fmul_rn(g, __ldg(weight + j)), __fmul_rn(v, rs), dot);
    });
    const float b = group_reduce<kThreads>(dot, SumOp{}, smem) * inv_c;
    const auto grad = [&](int64_t j, float g, float v) {
      return rs * (__fmul_rn(g, __ldg(weight + j)) - __fmul_rn(__fmul_rn(v, rs), b));
    };
    if constexpr (kAdd) {
      row_map3<kThreads, V>(dx + r * c, gr, xr, add + r * c, c, lane,
                            [&](int64_t j, float g, float v, float d) {
                              return __fadd_rn(to_float(from_float<T>(grad(j, g, v))), d);
                            });
    } else {
      row_map2<kThreads, V>(dx + r * c, gr, xr, c, lane, grad);
    }
  }
}

// dy * h of elements (r, j .. j + V - 1), for the dweight column sums.
template <typename T>
struct RmsNormWeightGradSrc {
  const T* dy;
  const T* x;
  const float* rstd;
  int64_t c;
  template <int V>
  __device__ STOKER_FORCEINLINE void load(int64_t r, int64_t j, float (&v)[1][V]) const {
    float g[V], xv[V];
    load_floats<V>(g, dy + r * c + j);
    load_floats<V>(xv, x + r * c + j);
    const float rs = __ldg(rstd + r);
#pragma unroll
    for (int q = 0; q < V; ++q) v[0][q] = __fmul_rn(g[q], rounded_h<T>(xv[q], rs));
  }
};

bool aligned_rows(const Tensor& t, int64_t c) {
  return rows_aligned(t.data(), c, dtype_size(t.dtype()));
}

template <bool kAdd>
void launch_forward(const Tensor& y, const Tensor* sum, const Tensor& rstd, const Tensor& x,
                    const Tensor* residual, const Tensor& weight, float eps) {
  const core::DeviceScope scope(x.device().index);
  const int64_t c = weight.numel();
  const int64_t n = x.numel() / c;
  bool vec = aligned_rows(x, c) && aligned_rows(y, c);
  if (kAdd) vec = vec && aligned_rows(*sum, c) && aligned_rows(*residual, c);
  const cudaStream_t stream = core::cuda_stream(x.device());
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    visit_row_config(c, vec, [&](auto threads, auto use_vec) {
      constexpr int kThreads = decltype(threads)::value;
      constexpr int V = decltype(use_vec)::value ? 16 / sizeof(T) : 1;
      const unsigned grid =
          row_grid(n, kThreads, int64_t{sm_count(x.device().index)} * kBlocksPerSm);
      rmsnorm_forward_kernel<kThreads, V, kAdd><<<grid, kRowBlock, 0, stream>>>(
          static_cast<T*>(y.data()), sum ? static_cast<T*>(sum->data()) : nullptr,
          static_cast<float*>(rstd.data()), static_cast<const T*>(x.data()),
          residual ? static_cast<const T*>(residual->data()) : nullptr,
          static_cast<const float*>(weight.data()), n, c, eps);
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

template <bool kAdd>
void launch_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor* add,
                     const Tensor& x, const Tensor& rstd, const Tensor& weight) {
  const core::DeviceScope scope(x.device().index);
  const int64_t c = weight.numel();
  const int64_t n = x.numel() / c;
  bool vec = aligned_rows(dx, c) && aligned_rows(dy, c) && aligned_rows(x, c);
  if (kAdd) vec = vec && aligned_rows(*add, c);
  const cudaStream_t stream = core::cuda_stream(x.device());
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pdy = static_cast<const T*>(dy.data());
    const T* px = static_cast<const T*>(x.data());
    const float* pr = static_cast<const float*>(rstd.data());
    // The weight gradient first: dx may alias dy, and the column sums read every row.
    const RmsNormWeightGradSrc<T> src{pdy, px, pr, c};
    const ColumnOut<1> out{{static_cast<float*>(dweight.data())}};
    if (rows_aligned(pdy, c, sizeof(T)) && rows_aligned(px, c, sizeof(T))) {
      launch_column_sums<1, 16 / sizeof(T)>(x.device(), src, n, c, out);
    } else {
      launch_column_sums<1, 1>(x.device(), src, n, c, out);
    }
    visit_row_config(c, vec, [&](auto threads, auto use_vec) {
      constexpr int kThreads = decltype(threads)::value;
      constexpr int V = decltype(use_vec)::value ? 16 / sizeof(T) : 1;
      const unsigned grid =
          row_grid(n, kThreads, int64_t{sm_count(x.device().index)} * kBlocksPerSm);
      rmsnorm_backward_kernel<kThreads, V, kAdd><<<grid, kRowBlock, 0, stream>>>(
          static_cast<T*>(dx.data()), pdy, px, add ? static_cast<const T*>(add->data()) : nullptr,
          pr, static_cast<const float*>(weight.data()), n, c);
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

}  // namespace

void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     float eps) {
  launch_forward<false>(y, nullptr, rstd, x, nullptr, weight, eps);
}

void rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                      const Tensor& rstd, const Tensor& weight) {
  launch_backward<false>(dx, dweight, dy, nullptr, x, rstd, weight);
}

void add_rmsnorm_forward(const Tensor& y, const Tensor& sum, const Tensor& rstd, const Tensor& x,
                         const Tensor& residual, const Tensor& weight, float eps) {
  launch_forward<true>(y, &sum, rstd, x, &residual, weight, eps);
}

void add_rmsnorm_backward(const Tensor& dsum, const Tensor& dweight, const Tensor& dy,
                          const Tensor& dsum_in, const Tensor& sum, const Tensor& rstd,
                          const Tensor& weight) {
  launch_backward<true>(dsum, dweight, dy, &dsum_in, sum, rstd, weight);
}

STOKER_REGISTER_STUB(rmsnorm_forward, rmsnorm_forward);
STOKER_REGISTER_STUB(rmsnorm_backward, rmsnorm_backward);
STOKER_REGISTER_STUB(add_rmsnorm_forward, add_rmsnorm_forward);
STOKER_REGISTER_STUB(add_rmsnorm_backward, add_rmsnorm_backward);

}  // namespace stoker::ops::cuda
