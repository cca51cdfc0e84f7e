// CUDA pieces of attention (ops/attention_stubs.h): head permutations and the fused causal
// softmax forward/backward. The GEMMs between them are cuBLASLt's (ops::gemm_batched).
//
// Permutations: one thread per 16-byte Pack of a D-element head row (per element when D or a
// base pointer does not allow Packs); every element is read once and written once — except with
// grouped-query heads (KV < H), where the expansion reads each key/value row H / KV times (from
// L2) and its inverse, one thread per Pack of a token's slot, sums the group's rows in fp32.
//
// Causal softmax (forward and backward): one warp per row of a [T, T] matrix, the row held in
// registers (kElems values per lane, T <= 32 * kElems, at most 2048), so each input is read
// once and each output written once: no second pass through L2 for the normalization. Lane l
// owns Packs l, l + 32, ... of the row (16-byte loads, coalesced across the warp). Row i only
// reads its visible keys start..i (start = 0, or i - clamp(position, 0, i) with a document
// mask: one broadcast load of the row's position) — the causal half of the matrix and earlier
// documents are never loaded — and writes zeros elsewhere (the next GEMM reads the whole row).
// Statistics in fp32: the max and the sum by warp butterflies; exp is expf (full precision, the
// kernel is memory-bound).
//   forward:  p_j = exp(s_j - max) / sum             (p may alias s)
//   backward: ds_j = p_j (dp_j - sum_k dp_k p_k) * scale   (ds may alias dp)
#include <cmath>

#include "kernel_util.cuh"
#include "nn_util.cuh"
#include "ops/attention_stubs.h"
#include "stoker/ops/attention.h"

namespace stoker::ops::cuda {

namespace {

// ---- permutations between [B, T, G, H, D] (tokens) and [G, B, H, T, D] (heads) ----

// Rows enumerated as the multi-head token layout [B, T, G, H, D]; the token row is the slot of
// head h of group g in a token's [H + 2 KV] slots (G = 1: H slots), so with KV < H (kToHeads
// only) several head rows read one key/value slot.
template <int V, bool kToHeads, typename T>
__global__ void __launch_bounds__(kBlockSize)
    permute_heads_kernel(T* __restrict__ dst, const T* __restrict__ src, int64_t batch, int64_t seq,
                         int64_t groups, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t packs_per_row = head_dim / V;
  const int64_t total = batch * seq * groups * heads * packs_per_row;
  const int64_t slots = groups == 1 ? heads : heads + 2 * kv_heads;
  const int64_t group_size = heads / kv_heads;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t p = idx % packs_per_row;
    int64_t q = idx / packs_per_row;
    const int64_t h = q % heads;
    q /= heads;
    const int64_t g = q % groups;
    q /= groups;
    const int64_t t = q % seq;
    const int64_t b = q / seq;
    const int64_t slot = g == 0 ? h : heads + (g - 1) * kv_heads + h / group_size;
    const int64_t r = (b * seq + t) * slots + slot;              // row of the token-major layout
    const int64_t hr = ((g * batch + b) * heads + h) * seq + t;  // row of the head-major layout
    const int64_t from = (kToHeads ? r : hr) * head_dim + p * V;
    const int64_t to = (kToHeads ? hr : r) * head_dim + p * V;
    store_pack<V>(dst + to, load_pack<V>(src + from));
  }
}

// tokens_from_heads with KV < H: Pack p of slot `slot` of token (b, t) of dst
// [B, T, H + 2 KV, D] from src [3, B, H, T, D]; a key/value slot is the fp32 sum of its group's
// H / KV rows (ascending head order, as the CPU reference), a query slot a copy.
template <int V, typename T>
__global__ void __launch_bounds__(kBlockSize)
    sum_kv_heads_kernel(T* __restrict__ dst, const T* __restrict__ src, int64_t batch, int64_t seq,
                        int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const int64_t packs_per_row = head_dim / V;
  const int64_t slots = heads + 2 * kv_heads, group_size = heads / kv_heads;
  const int64_t total = batch * seq * slots * packs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    const int64_t p = idx % packs_per_row;
    const int64_t r = idx / packs_per_row;  // token-major row
    const int64_t slot = r % slots;
    const int64_t t = r / slots % seq;
    const int64_t b = r / slots / seq;
    const int64_t g = slot < heads ? 0 : 1 + (slot - heads) / kv_heads;
    const int64_t h0 = g == 0 ? slot : (slot - heads) % kv_heads * group_size;
    const int64_t n = g == 0 ? 1 : group_size;
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0.0f;
    for (int64_t h = h0; h < h0 + n; ++h) {
      const Pack<T, V> x =
          load_pack<V>(src + (((g * batch + b) * heads + h) * seq + t) * head_dim + p * V);
#pragma unroll
      for (int e = 0; e < V; ++e) acc[e] += to_float(x.v[e]);
    }
    Pack<T, V> y;
#pragma unroll
    for (int e = 0; e < V; ++e) y.v[e] = from_float<T>(acc[e]);
    store_pack<V>(dst + r * head_dim + p * V, y);
  }
}

template <bool kToHeads>
void permute_heads(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq, int64_t groups,
                   int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const core::DeviceScope scope(src.device().index);
  const cudaStream_t stream = core::cuda_stream(src.device());
  const bool sum = !kToHeads && groups == 3 && kv_heads < heads;
  visit_float(src.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    const bool vec = head_dim % V == 0 && aligned16(src.data()) && aligned16(dst.data());
    const int64_t rows = sum ? batch * seq * (heads + 2 * kv_heads) : batch * seq * groups * heads;
    const int64_t items = rows * (vec ? head_dim / V : head_dim);
    const unsigned grid = grid_for(items, src.device().index);
    auto* d = static_cast<T*>(dst.data());
    const auto* s = static_cast<const T*>(src.data());
    if (sum && vec)
      sum_kv_heads_kernel<V>
          <<<grid, kBlockSize, 0, stream>>>(d, s, batch, seq, heads, kv_heads, head_dim);
    else if (sum)
      sum_kv_heads_kernel<1>
          <<<grid, kBlockSize, 0, stream>>>(d, s, batch, seq, heads, kv_heads, head_dim);
    else if (vec)
      permute_heads_kernel<V, kToHeads>
          <<<grid, kBlockSize, 0, stream>>>(d, s, batch, seq, groups, heads, kv_heads, head_dim);
    else
      permute_heads_kernel<1, kToHeads>
          <<<grid, kBlockSize, 0, stream>>>(d, s, batch, seq, groups, heads, kv_heads, head_dim);
    STOKER_CUDA_CHECK(cudaGetLastError());
  });
}

// ---- causal softmax rows ----

constexpr int kRowsPerBlock = kRowBlock / 32;

__device__ STOKER_FORCEINLINE float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(~0u, v, o));
  return v;
}
__device__ STOKER_FORCEINLINE float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(~0u, v, o);
  return v;
}

// The document positions of a softmax: one of the pointers (i32 or i64 [B, T]), or neither
// (plain causal).
struct KeyWindow {
  const int32_t* pos32;
  const int64_t* pos64;
  int64_t heads;

  // The first visible key of row r (rows ordered [B, H, T]: r % seq = i sees keys start..i).
  __device__ STOKER_FORCEINLINE int64_t start(int64_t r, int64_t seq) const {
    if (pos32 == nullptr && pos64 == nullptr) return 0;
    const int64_t i = r % seq;
    const int64_t token = r / (heads * seq) * seq + i;
    const int64_t pos = pos32 != nullptr ? pos32[token] : pos64[token];
    return pos <= 0 ? i : pos >= i ? 0 : i - pos;
  }
};

KeyWindow key_window(const Tensor& positions, int64_t heads) {
  KeyWindow w{nullptr, nullptr, heads};
  if (positions.defined() && positions.dtype() == DType::i32)
    w.pos32 = static_cast<const int32_t*>(positions.data());
  else if (positions.defined())
    w.pos64 = static_cast<const int64_t*>(positions.data());
  return w;
}

// Row r of `rows` rows of length `seq` (r % seq = i: keys start..i are visible). V elements per
// Pack (1: scalar path), kElems per lane.
template <int V, int kElems, typename T>
__global__ void __launch_bounds__(kRowBlock)
    causal_softmax_forward_kernel(T* p, const T* s, int64_t rows, int64_t seq, KeyWindow window) {
  constexpr int kPacks = kElems / V;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;  // uniform per warp
  const int lane = threadIdx.x % 32;
  const int64_t n = r % seq + 1;
  const int64_t start = window.start(r, seq);
  const int64_t row_packs = seq / V;
  const T* in = s + r * seq;
  T* out = p + r * seq;
  float v[kPacks][V];
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * 32 + lane;
    if (pk * V < n && (pk + 1) * V > start) {
      const Pack<T, V> x = load_pack<V>(in + pk * V);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int64_t j = pk * V + e;
        v[k][e] = j >= start && j < n ? to_float(x.v[e]) : -INFINITY;
        mx = fmaxf(mx, v[k][e]);
      }
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) v[k][e] = -INFINITY;
    }
  }
  mx = warp_max(mx);  // finite unless the row holds -inf/NaN: key i is always visible
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacks; ++k)
#pragma unroll
    for (int e = 0; e < V; ++e) {
      v[k][e] = v[k][e] == -INFINITY ? 0.0f : expf(v[k][e] - mx);
      sum += v[k][e];
    }
  const float inv = 1.0f / warp_sum(sum);
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * 32 + lane;
    if (pk < row_packs) {
      Pack<T, V> y;
#pragma unroll
      for (int e = 0; e < V; ++e) y.v[e] = from_float<T>(v[k][e] * inv);
      store_pack<V>(out + pk * V, y);
    }
  }
}

template <int V, int kElems, typename T>
__global__ void __launch_bounds__(kRowBlock)
    causal_softmax_backward_kernel(T* ds, const T* dp, const T* p, int64_t rows, int64_t seq,
                                   float scale, KeyWindow window) {
  constexpr int kPacks = kElems / V;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t n = r % seq + 1;
  const int64_t start = window.start(r, seq);
  const int64_t row_packs = seq / V;
  const T* gr = dp + r * seq;
  const T* pr = p + r * seq;
  T* out = ds + r * seq;
  float g[kPacks][V], pv[kPacks][V];
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * 32 + lane;
    if (pk * V < n && (pk + 1) * V > start) {
      const Pack<T, V> a = load_pack<V>(gr + pk * V);
      const Pack<T, V> b = load_pack<V>(pr + pk * V);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int64_t j = pk * V + e;
        const bool live = j >= start && j < n;
        g[k][e] = live ? to_float(a.v[e]) : 0.0f;
        pv[k][e] = live ? to_float(b.v[e]) : 0.0f;
        dot = fmaf(g[k][e], pv[k][e], dot);
      }
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) g[k][e] = pv[k][e] = 0.0f;
    }
  }
  dot = warp_sum(dot);
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64_t pk = static_cast<int64_t>(k) * 32 + lane;
    if (pk < row_packs) {
      Pack<T, V> y;
#pragma unroll
      for (int e = 0; e < V; ++e) y.v[e] = from_float<T>(pv[k][e] * (g[k][e] - dot) * scale);
      store_pack<V>(out + pk * V, y);
    }
  }
}

// Calls f(integral_constant<V>, integral_constant<kElems>) for rows of `seq` elements of T.
template <typename T, typename F>
void visit_softmax_config(int64_t seq, bool vec, F&& f) {
  constexpr int kV = 16 / sizeof(T);
  auto by_elems = [&](auto v) {
    if (seq <= 32 * 8) return f(v, std::integral_constant<int, 8>{});
    if (seq <= 32 * 16) return f(v, std::integral_constant<int, 16>{});
    if (seq <= 32 * 32) return f(v, std::integral_constant<int, 32>{});
    return f(v, std::integral_constant<int, 64>{});
  };
  if (vec) return by_elems(std::integral_constant<int, kV>{});
  return by_elems(std::integral_constant<int, 1>{});
}

unsigned softmax_grid(int64_t rows) {
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  STOKER_CHECK(blocks <= 0x7fffffff, "ops::attention: ", rows,
               " softmax rows exceed one CUDA grid; use a smaller batch");
  return static_cast<unsigned>(blocks);
}

}  // namespace

void heads_from_tokens(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq,
                       int64_t groups, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  permute_heads<true>(dst, src, batch, seq, groups, heads, kv_heads, head_dim);
}

void tokens_from_heads(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq,
                       int64_t groups, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  permute_heads<false>(dst, src, batch, seq, groups, heads, kv_heads, head_dim);
}

void causal_softmax_forward(const Tensor& p, const Tensor& s, int64_t seq, const Tensor& positions,
                            int64_t heads) {
  STOKER_CHECK(seq <= kAttentionMaxSeqLenCuda, "internal: causal softmax row of ", seq,
               " elements exceeds ", kAttentionMaxSeqLenCuda);
  const core::DeviceScope scope(s.device().index);
  const cudaStream_t stream = core::cuda_stream(s.device());
  const int64_t rows = s.numel() / seq;
  visit_float(s.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vec =
        rows_aligned(s.data(), seq, sizeof(T)) && rows_aligned(p.data(), seq, sizeof(T));
    visit_softmax_config<T>(seq, vec, [&](auto v, auto elems) {
      constexpr int V = decltype(v)::value, kElems = decltype(elems)::value;
      causal_softmax_forward_kernel<V, kElems><<<softmax_grid(rows), kRowBlock, 0, stream>>>(
          static_cast<T*>(p.data()), static_cast<const T*>(s.data()), rows, seq,
          key_window(positions, heads));
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

void causal_softmax_backward(const Tensor& ds, const Tensor& dp, const Tensor& p, int64_t seq,
                             float scale, const Tensor& positions, int64_t heads) {
  STOKER_CHECK(seq <= kAttentionMaxSeqLenCuda, "internal: causal softmax row of ", seq,
               " elements exceeds ", kAttentionMaxSeqLenCuda);
  const core::DeviceScope scope(p.device().index);
  const cudaStream_t stream = core::cuda_stream(p.device());
  const int64_t rows = p.numel() / seq;
  visit_float(p.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const bool vec = rows_aligned(ds.data(), seq, sizeof(T)) &&
                     rows_aligned(dp.data(), seq, sizeof(T)) &&
                     rows_aligned(p.data(), seq, sizeof(T));
    visit_softmax_config<T>(seq, vec, [&](auto v, auto elems) {
      constexpr int V = decltype(v)::value, kElems = decltype(elems)::value;
      causal_softmax_backward_kernel<V, kElems><<<softmax_grid(rows), kRowBlock, 0, stream>>>(
          static_cast<T*>(ds.data()), static_cast<const T*>(dp.data()),
          static_cast<const T*>(p.data()), rows, seq, scale, key_window(positions, heads));
      STOKER_CUDA_CHECK(cudaGetLastError());
    });
  });
}

STOKER_REGISTER_STUB(heads_from_tokens, heads_from_tokens);
STOKER_REGISTER_STUB(tokens_from_heads, tokens_from_heads);
STOKER_REGISTER_STUB(causal_softmax_forward, causal_softmax_forward);
STOKER_REGISTER_STUB(causal_softmax_backward, causal_softmax_backward);

}  // namespace stoker::ops::cuda
