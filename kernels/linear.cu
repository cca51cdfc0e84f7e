// CUDA add_bias and bias_grad (the bias halves of a linear layer; the matrix halves are GEMMs).
//
// add_bias: one read-modify-write pass over y. When a row holds whole Packs (C a multiple of the
// Pack width and y aligned) every Pack lies inside one row and needs one column index (a single
// 64-bit modulo per 16 bytes); otherwise it runs element by element. y + b in fp32 rounded once:
// the CPU reference's bits.
// bias_grad: deterministic column sums (nn_util.cuh): per (row chunk, column tile) partials, then
// the chunks added in order into dbias. No float atomics, so the same dy gives the same dbias
// bits on every run.
#include "kernel_util.cuh"
#include "nn_util.cuh"
#include "ops/linear_stubs.h"

namespace stoker::ops::cuda {

namespace {

template <int V, typename T>
__global__ void __launch_bounds__(kBlockSize)
    add_bias_kernel(T* y, const float* bias, int64_t n, int64_t c) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;  // V == 1: plain elements
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += stride) {
    const int64_t i = p * V;
    const int64_t j = i % c;
    Pack<T, V> v = load_pack<V>(y + i);
#pragma unroll
    for (int k = 0; k < V; ++k) v.v[k] = from_float<T>(to_float(v.v[k]) + __ldg(bias + j + k));
    store_pack<V>(y + i, v);
  }
}

template <typename T>
struct BiasGradSrc {
  const T* dy;
  int64_t c;
  template <int V>
  __device__ STOKER_FORCEINLINE void load(int64_t r, int64_t j, float (&v)[1][V]) const {
    load_floats<V>(v[0], dy + r * c + j);
  }
};

}  // namespace

void add_bias(const Tensor& y, const Tensor& bias) {
  const core::DeviceScope scope(y.device().index);
  const int64_t c = bias.numel();
  const int64_t n = y.numel();
  visit_float(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    T* p = static_cast<T*>(y.data());
    const float* b = static_cast<const float*>(bias.data());
    const cudaStream_t stream = core::cuda_stream(y.device());
    if (c % V == 0 && aligned16(p)) {
      add_bias_kernel<V><<<grid_for(n / V, y.device().index), kBlockSize, 0, stream>>>(p, b, n, c);
    } else {
      add_bias_kernel<1><<<grid_for(n, y.device().index), kBlockSize, 0, stream>>>(p, b, n, c);
    }
    STOKER_CUDA_CHECK(cudaGetLastError());
  });
}

void bias_grad(const Tensor& dbias, const Tensor& dy) {
  const core::DeviceScope scope(dy.device().index);
  const int64_t c = dbias.numel();
  const int64_t n = dy.numel() / c;
  visit_float(dy.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const BiasGradSrc<T> src{static_cast<const T*>(dy.data()), c};
    const ColumnOut<1> out{{static_cast<float*>(dbias.data())}};
    if (rows_aligned(dy.data(), c, sizeof(T))) {
      launch_column_sums<1, 16 / sizeof(T)>(dy.device(), src, n, c, out);
    } else {
      launch_column_sums<1, 1>(dy.device(), src, n, c, out);
    }
  });
}

STOKER_REGISTER_STUB(add_bias, add_bias);
STOKER_REGISTER_STUB(bias_grad, bias_grad);

}  // namespace stoker::ops::cuda
