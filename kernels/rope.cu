// CUDA rotary embeddings of a qkv (ops/attention.h), in place. Thread (token r, pack p) owns
// columns i = p V .. p V + V - 1 of the first half of every query and key head of row r: it
// computes cos and sin of float(position) * inv_freq[i] once (sincosf, the accurate one: the
// same function as PyTorch's CUDA cos/sin, so the values rounded to the dtype are
// transformers'), then for each of the H + KV heads loads the V elements at i and at i + D/2,
// rotates them and stores them back — 16-byte Packs when D/2 is a multiple of V and the data
// aligned, else V = 1. Each element is read and written by one thread, so in place is safe.
// Products go through __fmul_rn and sums through __fadd_rn/__fsub_rn: every one is rounded to
// the dtype before the next, as the CPU reference (and apply_rotary_pos_emb) rounds them.
#include "kernel_util.cuh"
#include "ops/rope_stubs.h"

namespace stoker::ops::cuda {

namespace {

template <typename T>
__device__ STOKER_FORCEINLINE float rounded(float v) {
  return to_float(from_float<T>(v));
}

template <int V, typename T, typename P>
__global__ void __launch_bounds__(kBlockSize)
    rope_kernel(T* x, const P* pos, const float* inv, int64_t n, int64_t row_width, int64_t rotated,
                int64_t half, float sign) {
  const int64_t packs = half / V;
  const int64_t items = n * packs;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < items;
       t += stride) {
    const int64_t r = t / packs, i0 = (t - r * packs) * V;
    const float p = static_cast<float>(pos[r]);
    float c[V], s[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float sv, cv;
      sincosf(__fmul_rn(p, __ldg(inv + i0 + k)), &sv, &cv);
      c[k] = rounded<T>(cv);
      s[k] = sign * rounded<T>(sv);
    }
    T* row = x + r * row_width + i0;
    for (int64_t h = 0; h < rotated; ++h) {
      T* lo = row + h * 2 * half;
      float a[V], b[V], oa[V], ob[V];
      load_floats<V>(a, lo);
      load_floats<V>(b, lo + half);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        oa[k] = __fsub_rn(rounded<T>(__fmul_rn(a[k], c[k])), rounded<T>(__fmul_rn(b[k], s[k])));
        ob[k] = __fadd_rn(rounded<T>(__fmul_rn(b[k], c[k])), rounded<T>(__fmul_rn(a[k], s[k])));
      }
      store_floats<V>(lo, oa);
      store_floats<V>(lo + half, ob);
    }
  }
}

}  // namespace

void rope_qkv(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_heads,
              int64_t num_kv_heads, float sign) {
  const core::DeviceScope scope(qkv.device().index);
  const int64_t width = qkv.size(-1), n = qkv.numel() / width;
  const int64_t half = inv_freq.numel(), rotated = num_heads + num_kv_heads;
  const cudaStream_t stream = core::cuda_stream(qkv.device());
  const float* inv = static_cast<const float*>(inv_freq.data());
  visit_float(qkv.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* x = static_cast<T*>(qkv.data());
    constexpr int kV = 16 / sizeof(T);
    // Every head's halves start on 16 bytes when the data does and D/2 is a multiple of kV.
    const bool vec = half % kV == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    auto launch = [&](auto width_tag, const auto* pos) {
      constexpr int V = decltype(width_tag)::value;
      rope_kernel<V><<<grid_for(n * (half / V), qkv.device().index), kBlockSize, 0, stream>>>(
          x, pos, inv, n, width, rotated, half, sign);
      STOKER_CUDA_CHECK(cudaGetLastError());
    };
    auto with_positions = [&](auto width_tag) {
      if (positions.dtype() == DType::i32) {
        launch(width_tag, static_cast<const int32_t*>(positions.data()));
      } else {
        launch(width_tag, static_cast<const int64_t*>(positions.data()));
      }
    };
    if (vec) {
      with_positions(std::integral_constant<int, kV>{});
    } else {
      with_positions(std::integral_constant<int, 1>{});
    }
  });
}

STOKER_REGISTER_STUB(rope_qkv, rope_qkv);

}  // namespace stoker::ops::cuda
