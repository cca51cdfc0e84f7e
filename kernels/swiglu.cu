// CUDA SwiGLU (ops/activation.h): one pass, each thread V adjacent columns j of one row — the
// gate values x[r, j..], the up values x[r, F + j..] and y[r, j..] (dy, and both halves of dx, in
// the backward) — as 16-byte Packs when F is a multiple of V and the rows start aligned, else one
// element a thread. Per-element math is ops/swiglu_math.h, the CPU reference's, so the bits are
// the CPU's. The backward reads an element's gate and up before writing their gradients, and no
// other thread touches them, so dx may be x itself.
#include "kernel_util.cuh"
#include "ops/swiglu_math.h"
#include "ops/swiglu_stubs.h"

namespace stoker::ops::cuda {

namespace {

template <typename T>
struct RoundTo {
  __device__ STOKER_FORCEINLINE float operator()(float v) const {
    return to_float(from_float<T>(v));
  }
};

template <int V, typename T>
__global__ void __launch_bounds__(kBlockSize)
    swiglu_forward_kernel(T* y, const T* x, int64_t n, int64_t f) {
  const int64_t packs_per_row = f / V;
  const int64_t items = n * packs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += stride) {
    const int64_t r = i / packs_per_row, j = (i - r * packs_per_row) * V;
    float g[V], u[V], out[V];
    load_floats<V>(g, x + r * 2 * f + j);
    load_floats<V>(u, x + r * 2 * f + f + j);
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = detail::swiglu(g[k], u[k], RoundTo<T>{});
    store_floats<V>(y + r * f + j, out);
  }
}

template <int V, typename T>
__global__ void __launch_bounds__(kBlockSize)
    swiglu_backward_kernel(T* dx, const T* dy, const T* x, int64_t n, int64_t f) {
  const int64_t packs_per_row = f / V;
  const int64_t items = n * packs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
       i += stride) {
    const int64_t r = i / packs_per_row, j = (i - r * packs_per_row) * V;
    float g[V], u[V], d[V], dg[V], du[V];
    load_floats<V>(g, x + r * 2 * f + j);
    load_floats<V>(u, x + r * 2 * f + f + j);
    load_floats<V>(d, dy + r * f + j);
#pragma unroll
    for (int k = 0; k < V; ++k) detail::swiglu_grad(d[k], g[k], u[k], RoundTo<T>{}, &dg[k], &du[k]);
    store_floats<V>(dx + r * 2 * f + j, dg);
    store_floats<V>(dx + r * 2 * f + f + j, du);
  }
}

// Calls launch(std::integral_constant<int, V>{}) with the widest V the tensors allow.
template <typename T, typename F>
void with_width(int64_t f, std::initializer_list<const void*> ptrs, F&& launch) {
  constexpr int kV = 16 / sizeof(T);
  bool vec = f % kV == 0;
  for (const void* p : ptrs) vec = vec && reinterpret_cast<uintptr_t>(p) % 16 == 0;
  if (vec) return launch(std::integral_constant<int, kV>{});
  return launch(std::integral_constant<int, 1>{});
}

}  // namespace

void swiglu_forward(const Tensor& y, const Tensor& x) {
  const core::DeviceScope scope(x.device().index);
  const int64_t f = y.size(-1), n = y.numel() / f;
  const cudaStream_t stream = core::cuda_stream(x.device());
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* py = static_cast<T*>(y.data());
    const T* px = static_cast<const T*>(x.data());
    with_width<T>(f, {py, px}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      swiglu_forward_kernel<V>
          <<<grid_for(n * (f / V), x.device().index), kBlockSize, 0, stream>>>(py, px, n, f);
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void swiglu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) {
  const core::DeviceScope scope(x.device().index);
  const int64_t f = dy.size(-1), n = dy.numel() / f;
  const cudaStream_t stream = core::cuda_stream(x.device());
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* pdx = static_cast<T*>(dx.data());
    const T* pdy = static_cast<const T*>(dy.data());
    const T* px = static_cast<const T*>(x.data());
    with_width<T>(f, {pdx, pdy, px}, [&](auto width) {
      constexpr int V = decltype(width)::value;
      swiglu_backward_kernel<V>
          <<<grid_for(n * (f / V), x.device().index), kBlockSize, 0, stream>>>(pdx, pdy, px, n, f);
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

STOKER_REGISTER_STUB(swiglu_forward, swiglu_forward);
STOKER_REGISTER_STUB(swiglu_backward, swiglu_backward);

}  // namespace stoker::ops::cuda
