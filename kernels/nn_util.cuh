// Private helpers of the nn kernels (layernorm.cu, loss.cu, linear.cu, embedding.cu): row groups
// and deterministic column sums. Builds on kernel_util.cuh (Pack, conversions, grid sizing).
//
// Row groups: a row of C elements is owned by kThreads threads — one warp (kThreads = 32, eight
// rows per 256-thread block) for narrow rows, the whole block (kThreads = 256) for wide ones.
// Lane l visits elements l, l + kThreads, ... (or 16-byte Packs of them when every row start is
// aligned), and `group_reduce` folds the lanes with a fixed butterfly (+ a fixed shared-memory
// order across warps). Every lane ends with the same value, and the result depends only on the
// data and C, so row statistics are identical run to run.
//
// Column sums (bias_grad, layernorm's dgamma/dbeta) never use float atomics: block (x, y) sums
// 32 columns over row chunk y (threads 32 x 8, each thread a fixed row stride, then a fixed
// shared-memory fold over the 8), writing one partial per (chunk, column); a second kernel adds
// the chunks in index order into the output (+=). The chunking depends only on (N, C), never on
// the GPU model or timing, so the sums are bitwise reproducible. With one chunk the first
// kernel adds into the output directly.
#pragma once

#include <algorithm>
#include <type_traits>

#include "kernel_util.cuh"
#include "stoker/core/tensor.h"

namespace stoker::ops::cuda {

constexpr int kRowBlock = 256;  // threads per block of every row-group kernel

// Threads per row for rows of `c` elements (a warp up to 2048, else the block).
inline bool wide_rows(int64_t c) { return c > 2048; }

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Rows of `c` elements of type-size `elem` starting at `p` all begin on 16 bytes.
inline bool rows_aligned(const void* p, int64_t c, size_t elem) {
  return aligned16(p) && (static_cast<size_t>(c) * elem) % 16 == 0;
}

// Blocks for a grid-stride loop over `rows` rows, at most `cap` blocks.
inline unsigned row_grid(int64_t rows, int threads_per_row, int64_t cap) {
  const int64_t per_block = kRowBlock / threads_per_row;
  return static_cast<unsigned>(std::clamp<int64_t>((rows + per_block - 1) / per_block, 1, cap));
}

// Calls f(std::integral_constant<int, kThreads>{}, std::bool_constant<kVec>{}) with the row
// group for rows of `c` elements and whether the Pack path may be used.
template <typename F>
void visit_row_config(int64_t c, bool vec, F&& f) {
  if (wide_rows(c)) {
    if (vec) return f(std::integral_constant<int, kRowBlock>{}, std::true_type{});
    return f(std::integral_constant<int, kRowBlock>{}, std::false_type{});
  }
  if (vec) return f(std::integral_constant<int, 32>{}, std::true_type{});
  return f(std::integral_constant<int, 32>{}, std::false_type{});
}

// ---- group reductions ----

struct SumOp {
  __device__ STOKER_FORCEINLINE float operator()(float a, float b) const { return a + b; }
};
struct Sum2Op {
  __device__ STOKER_FORCEINLINE float2 operator()(float2 a, float2 b) const {
    return make_float2(a.x + b.x, a.y + b.y);
  }
};

__device__ STOKER_FORCEINLINE float shfl_xor(float v, int o) { return __shfl_xor_sync(~0u, v, o); }
__device__ STOKER_FORCEINLINE float2 shfl_xor(float2 v, int o) {
  return make_float2(__shfl_xor_sync(~0u, v.x, o), __shfl_xor_sync(~0u, v.y, o));
}

// Folds v over the kThreads threads of a row group; every thread gets the result. `op` must be
// commutative to the bit (both partners of a butterfly step compute it). With kThreads > 32
// the group is the whole block and every thread must call it (it synchronizes the block);
// `smem` holds kThreads / 32 values and is free again on return.
template <int kThreads, typename V, typename Op>
__device__ STOKER_FORCEINLINE V group_reduce(V v, Op op, V* smem) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, shfl_xor(v, o));
  if constexpr (kThreads == 32) {
    return v;
  } else {
    static_assert(kThreads == kRowBlock, "a wide row group is the whole block");
    if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = v;
    __syncthreads();
    V r = smem[0];
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) r = op(r, smem[w]);
    __syncthreads();
    return r;
  }
}

// ---- row visits: lane-strided, 16-byte Packs when V > 1 (row start aligned) ----

// f(j, a[j]) for the elements of the row this lane owns.
template <int kThreads, int V, typename A, typename F>
__device__ STOKER_FORCEINLINE void row_visit(const A* a, int64_t n, int lane, F&& f) {
  const int64_t packs = n / V;
  for (int64_t p = lane; p < packs; p += kThreads) {
    const Pack<A, V> va = load_pack<V>(a + p * V);
#pragma unroll
    for (int k = 0; k < V; ++k) f(p * V + k, to_float(va.v[k]));
  }
  for (int64_t j = packs * V + lane; j < n; j += kThreads) f(j, to_float(a[j]));
}

// f(j, a[j], b[j]).
template <int kThreads, int V, typename A, typename B, typename F>
__device__ STOKER_FORCEINLINE void row_visit2(const A* a, const B* b, int64_t n, int lane, F&& f) {
  const int64_t packs = n / V;
  for (int64_t p = lane; p < packs; p += kThreads) {
    const Pack<A, V> va = load_pack<V>(a + p * V);
    const Pack<B, V> vb = load_pack<V>(b + p * V);
#pragma unroll
    for (int k = 0; k < V; ++k) f(p * V + k, to_float(va.v[k]), to_float(vb.v[k]));
  }
  for (int64_t j = packs * V + lane; j < n; j += kThreads) f(j, to_float(a[j]), to_float(b[j]));
}

// out[j] = f(j, a[j]).
template <int kThreads, int V, typename O, typename A, typename F>
__device__ STOKER_FORCEINLINE void row_map(O* out, const A* a, int64_t n, int lane, F&& f) {
  const int64_t packs = n / V;
  for (int64_t p = lane; p < packs; p += kThreads) {
    const Pack<A, V> va = load_pack<V>(a + p * V);
    Pack<O, V> r;
#pragma unroll
    for (int k = 0; k < V; ++k) r.v[k] = from_float<O>(f(p * V + k, to_float(va.v[k])));
    store_pack<V>(out + p * V, r);
  }
  for (int64_t j = packs * V + lane; j < n; j += kThreads)
    out[j] = from_float<O>(f(j, to_float(a[j])));
}

// out[j] = f(j, a[j], b[j]).
template <int kThreads, int V, typename O, typename A, typename B, typename F>
__device__ STOKER_FORCEINLINE void row_map2(O* out, const A* a, const B* b, int64_t n, int lane,
                                            F&& f) {
  const int64_t packs = n / V;
  for (int64_t p = lane; p < packs; p += kThreads) {
    const Pack<A, V> va = load_pack<V>(a + p * V);
    const Pack<B, V> vb = load_pack<V>(b + p * V);
    Pack<O, V> r;
#pragma unroll
    for (int k = 0; k < V; ++k)
      r.v[k] = from_float<O>(f(p * V + k, to_float(va.v[k]), to_float(vb.v[k])));
    store_pack<V>(out + p * V, r);
  }
  for (int64_t j = packs * V + lane; j < n; j += kThreads)
    out[j] = from_float<O>(f(j, to_float(a[j]), to_float(b[j])));
}

// out[j] = f(j, a[j], b[j], d[j]).
template <int kThreads, int V, typename O, typename A, typename B, typename D, typename F>
__device__ STOKER_FORCEINLINE void row_map3(O* out, const A* a, const B* b, const D* d, int64_t n,
                                            int lane, F&& f) {
  const int64_t packs = n / V;
  for (int64_t p = lane; p < packs; p += kThreads) {
    const Pack<A, V> va = load_pack<V>(a + p * V);
    const Pack<B, V> vb = load_pack<V>(b + p * V);
    const Pack<D, V> vd = load_pack<V>(d + p * V);
    Pack<O, V> r;
#pragma unroll
    for (int k = 0; k < V; ++k)
      r.v[k] = from_float<O>(f(p * V + k, to_float(va.v[k]), to_float(vb.v[k]), to_float(vd.v[k])));
    store_pack<V>(out + p * V, r);
  }
  for (int64_t j = packs * V + lane; j < n; j += kThreads)
    out[j] = from_float<O>(f(j, to_float(a[j]), to_float(b[j]), to_float(d[j])));
}

// out[j] = value for the row elements this lane owns.
template <int kThreads, int V, typename O>
__device__ STOKER_FORCEINLINE void row_fill(O* out, int64_t n, int lane, float value) {
  const O v = from_float<O>(value);
  const int64_t packs = n / V;
  Pack<O, V> pv;
#pragma unroll
  for (int k = 0; k < V; ++k) pv.v[k] = v;
  for (int64_t p = lane; p < packs; p += kThreads) store_pack<V>(out + p * V, pv);
  for (int64_t j = packs * V + lane; j < n; j += kThreads) out[j] = v;
}

// ---- deterministic column sums: out[k][j] += sum_r src(r, j)[k] ----
//
// Block (x, y) owns kColTile * V adjacent columns and row chunk y; thread (tx, ty) owns the V
// columns from tx * V (a 16-byte Pack of each source tensor when V > 1: C a multiple of V and
// the rows aligned, which the caller checks) and the chunk's rows ty, ty + kColRows, ... Each
// thread sums its rows in order, the block folds its kColRows lanes in order, and with several
// chunks a second kernel adds the chunks' partials in order: no atomics, so the same inputs give
// the same bits on every run. (V = 1 read 2-byte elements a thread: a warp moved 64 bytes of a
// half tensor per row, which held GPT-2's layer-norm parameter gradients to ~1 TB/s.)

template <int K>
struct ColumnOut {
  float* ptr[K];
};

constexpr int kColTile = 32;  // threads along the columns (one warp wide)
constexpr int kColRows = 8;   // row lanes per block
constexpr int64_t kColTargetBlocks = 1024;
constexpr int64_t kColMinRows = 64;  // rows per chunk at least (a chunk's work must be worth it)
// Chunks at most: the finishing kernel adds a column's chunks one after another.
constexpr int64_t kColMaxChunks = 64;

// Src: template <int V> __device__ void load(int64_t r, int64_t j, float (&v)[K][V]) const —
// the K values of elements (r, j .. j + V - 1).
template <int K, int V, typename Src>
__global__ void __launch_bounds__(kColTile* kColRows)
    column_partials_kernel(Src src, int64_t n, int64_t c, int64_t rows_per_chunk, float* partials,
                           ColumnOut<K> out) {
  constexpr int kCols = kColTile * V;  // columns per block
  __shared__ float tile[K][kColRows][kCols + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kCols;
  const int64_t j = c0 + static_cast<int64_t>(tx) * V;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = std::min(n, r0 + rows_per_chunk);
  float acc[K][V];
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int q = 0; q < V; ++q) acc[k][q] = 0.0f;
  if (j < c) {  // V > 1: C is a multiple of V, so the whole Pack is in range
#pragma unroll 4
    for (int64_t r = r0 + ty; r < r1; r += kColRows) {
      float v[K][V];
      src.template load<V>(r, j, v);
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int q = 0; q < V; ++q) acc[k][q] += v[k][q];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k)
#pragma unroll
    for (int q = 0; q < V; ++q) tile[k][ty][tx * V + q] = acc[k][q];
  __syncthreads();
  // Column t of the block: its kColRows lanes in order.
  for (int t = ty * kColTile + tx; t < kCols; t += kColTile * kColRows) {
    const int64_t col = c0 + t;
    if (col >= c) break;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float sum = tile[k][0][t];
#pragma unroll
      for (int y = 1; y < kColRows; ++y) sum += tile[k][y][t];
      if (gridDim.y == 1) {
        out.ptr[k][col] += sum;
      } else {
        partials[(static_cast<int64_t>(k) * gridDim.y + blockIdx.y) * c + col] = sum;
      }
    }
  }
}

template <int K>
__global__ void __launch_bounds__(kBlockSize)
    column_finish_kernel(const float* partials, int chunks, int64_t c, ColumnOut<K> out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < K * c;
       i += stride) {
    const int64_t k = i / c, j = i - k * c;
    const float* p = partials + k * chunks * c + j;
    float t = 0.0f;
    for (int q = 0; q < chunks; ++q) t += p[q * c];
    out.ptr[k][j] += t;
  }
}

// Enqueues the column sums of an n x c source on the current stream of `device` (the caller
// holds a DeviceScope), reading V adjacent columns a thread (V > 1 only where the source's rows
// are whole aligned Packs).
template <int K, int V, typename Src>
void launch_column_sums(core::Device device, Src src, int64_t n, int64_t c, ColumnOut<K> out) {
  const cudaStream_t stream = core::cuda_stream(device);
  const int64_t cols_per_block = int64_t{kColTile} * V;
  const int64_t col_blocks = (c + cols_per_block - 1) / cols_per_block;
  const int64_t max_chunks = std::max<int64_t>(1, n / kColMinRows);
  int64_t chunks = std::clamp<int64_t>((kColTargetBlocks + col_blocks - 1) / col_blocks, 1,
                                       std::min(max_chunks, kColMaxChunks));
  const int64_t rows_per_chunk = (n + chunks - 1) / chunks;
  chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  Tensor scratch;
  float* partials = nullptr;
  if (chunks > 1) {  // stream-ordered pool memory, released on this stream after the kernels
    scratch = Tensor::empty({K * chunks * c}, DType::f32, device);
    partials = static_cast<float*>(scratch.data());
  }
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
  column_partials_kernel<K, V>
      <<<grid, dim3(kColTile, kColRows), 0, stream>>>(src, n, c, rows_per_chunk, partials, out);
  STOKER_CUDA_CHECK(cudaGetLastError());
  if (chunks > 1) {
    column_finish_kernel<K><<<grid_for(K * c, device.index), kBlockSize, 0, stream>>>(
        partials, static_cast<int>(chunks), c, out);
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace stoker::ops::cuda
