// Fused causal attention (FlashAttention-2 style) for grouped-query heads of dim 64 or 128, bf16 /
// f16 with fp32 accumulation, optionally masked to documents: ops/flash_attention.h. The T x T
// scores never reach memory.
//
// Tiles: a CTA of 4 warps owns 64 rows (queries in the forward and dQ kernels, keys in the dK/dV
// kernel), 16 per warp; the other side streams through shared memory in tiles of 64 rows. q, k
// and v are read straight from the packed qkv [B, T, (H + 2 KV) D] (row stride (H + 2 KV) D;
// query head h at column h D, its kv head g = h / (H / KV) at (H + g) D for k and (H + KV + g) D
// for v): each head row is D / 8 cp.async 16-byte chunks; rows past T are zero-filled by the copy
// (src-size 0), so tails need no separate path. Shared rows are padded by 8 elements (144 or 272
// bytes, both 16 mod 128) so the 8 row addresses of an ldmatrix fall in distinct banks.
//
// Math: mma.sync.m16n8k16 (row.col, 16-bit inputs, f32 accumulators) fed by ldmatrix. Register
// layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4 g + t; an f32 accumulator
// tile 16x8 holds (g, 2t..2t+1) in c0,c1 and (g+8, 2t..2t+1) in c2,c3; an A tile 16x16 holds
// (g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8) pairs in a0..a3, which is why two neighbouring
// accumulator tiles of P (or dS) repack into one A fragment without any shuffle; a B tile 16x8
// ("col") holds (k = 2t..2t+1, n = g) in b0 and k + 8 in b1: ldmatrix of a row-major [n][k]
// matrix gives it directly, of a row-major [k][n] matrix with .trans.
//
// Registers: at D = 64 a warp keeps its 16-row A operands (q, or k and v, or q and dO) in
// registers across the loop; at D = 128 the backward's accumulators alone (dK and dV, 128 floats
// a thread) leave no room for them, so the backward re-reads them from shared memory (ldmatrix)
// at each use instead of spilling (AFrags below). The forward keeps q in registers at both.
//
// Causality: a query tile i only visits key tiles 0..i (tiles above the diagonal are skipped);
// the diagonal tile masks key > query. Key 0 is visible to every query, so each row's running
// max is finite after the first tile (no inf - inf).
//
// Documents (kDoc): a pre-pass turns positions [B, T] into each row's first visible key
// start_i = i - positions_i (clamped to [0, i]) and each query tile's minimum start. A query tile
// starts at the key tile of that minimum (earlier ones are invisible to all its rows), and every
// element is masked (key > i or key < start_i). A row's first visited tile can then be wholly
// masked for it, so the online softmax takes its exponent reference as 0 while the row's max is
// still -inf (as FA2 does); a row always sees itself, so its final max is finite. The dK/dV CTA
// of key tile j visits the query tiles whose minimum start is <= j's last key, up to the last
// such tile (found by the CTA's threads together before the loop).
//
// Softmax in fp32 in base 2: scores are multiplied by scale * log2(e) once, exp2f thereafter;
// lse is stored in natural log of the scaled scores (lse = ln sum_j exp(s_ij / sqrt(D))), as the
// reference defines it. P is rounded to the input dtype only as an mma operand.
//
// Backward (FA2): delta = rowsum(dO * O) by a small kernel; dK, dV by a CTA per (kv head, key
// tile) that iterates over the H / KV query heads of its group and, for each, over the query
// tiles i >= j, recomputing P^T = exp(K Q^T * scale - lse), so a kv head's gradient is the sum
// over its group in registers; dQ by a CTA per (query head, query tile) iterating over key tiles
// j <= i (same recomputation). No atomics: every element of dqkv is written once, by one thread,
// and results are the same run to run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "kernel_util.cuh"
#include "ops/flash_attention_stubs.h"

namespace stoker::ops::cuda {

namespace {

constexpr int kTile = 64;              // rows per tile (both sides)
constexpr int kWarps = 4;              // 16 rows per warp
constexpr int kThreads = 32 * kWarps;  // 128
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Shared row stride in elements for head dim D, and one 64-row tile's elements and bytes.
template <int D>
constexpr int kLds = D + 8;
template <int D>
constexpr int kTileElems = kTile* kLds<D>;
template <int D>
constexpr int kTileBytes = kTileElems<D> * 2;

// ---- PTX wrappers ----

__device__ STOKER_FORCEINLINE uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; zero-filled (nothing read) when !valid.
__device__ STOKER_FORCEINLINE void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ STOKER_FORCEINLINE void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ STOKER_FORCEINLINE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ STOKER_FORCEINLINE void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ STOKER_FORCEINLINE void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a b for one m16n8k16 tile.
template <bool kBf16>
__device__ STOKER_FORCEINLINE void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                       uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded (to nearest even) into one register: lo in the low half.
template <bool kBf16>
__device__ STOKER_FORCEINLINE uint32_t pack2(float lo, float hi) {
  if constexpr (kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}
template <bool kBf16>
__device__ STOKER_FORCEINLINE float2 unpack2(uint32_t v) {
  if constexpr (kBf16) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
}

// ---- tiles ----

// Rows row0..row0+63 of a [T, ld] matrix (columns col..col+D-1 of each) into shared
// [64][kLds<D>]; rows >= seq are zeros. Issues cp.async only (the caller waits).
template <int D>
__device__ STOKER_FORCEINLINE void load_tile(uint16_t* s, const uint16_t* g, int64_t ld, int row0,
                                             int seq) {
#pragma unroll
  for (int i = 0; i < kTile * D / 8 / kThreads; ++i) {  // D / 16 chunks of 16 bytes per thread
    const int chunk = threadIdx.x + i * kThreads;
    const int r = chunk / (D / 8), c = chunk % (D / 8);
    const bool valid = row0 + r < seq;
    const uint16_t* src = g + (valid ? static_cast<int64_t>(row0 + r) * ld : 0) + c * 8;
    cp_async16(s + r * kLds<D> + c * 8, src, valid);
  }
}

// The A operand (16 rows x D, D / 16 k-steps) of rows row0..row0+15 of a shared tile: loaded
// into registers once (kInRegs), or re-read from shared memory at each k-step, which needs the
// tile to stay put while in use (it does: every such tile is loaded once per CTA).
template <int D, bool kInRegs>
struct AFrags {
  uint32_t r[kInRegs ? D / 16 : 1][4];
  const uint16_t* row;  // this lane's ldmatrix row address (column 0)

  __device__ STOKER_FORCEINLINE void load(const uint16_t* s, int row0) {
    const int lane = threadIdx.x % 32;
    row = s + (row0 + lane % 16) * kLds<D> + (lane / 16) * 8;
    if constexpr (kInRegs) {
#pragma unroll
      for (int ks = 0; ks < D / 16; ++ks) ldmatrix_x4(r[ks], row + ks * 16);
    }
  }
  __device__ STOKER_FORCEINLINE void get(int ks, uint32_t (&a)[4]) const {
    if constexpr (kInRegs) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = r[ks][i];
    } else {
      ldmatrix_x4(a, row + ks * 16);
    }
  }
};

// acc[16 x 64] += A[16 x D] * M^T where M is a shared [64 rows][D] tile ("rows as columns":
// q k^T, dO v^T, k q^T, v dO^T).
template <bool kBf16, int D, bool kInRegs>
__device__ STOKER_FORCEINLINE void mma_abt(float (&acc)[8][4], const AFrags<D, kInRegs>& af,
                                           const uint16_t* s) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    uint32_t a[4];
    af.get(ks, a);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      ldmatrix_x4(
          b, s + (np * 16 + lane % 8 + (lane / 16) * 8) * kLds<D> + ks * 16 + ((lane / 8) % 2) * 8);
      mma<kBf16>(acc[2 * np], a, b[0], b[1]);
      mma<kBf16>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc[16 x D] += P[16 x 64] * M where P is an accumulator-layout tile (rounded here) and M a
// shared [64][D] tile (P v, dS k, P^T dO, dS^T q).
template <bool kBf16, int D>
__device__ STOKER_FORCEINLINE void mma_pm(float (&acc)[D / 8][4], const float (&p)[8][4],
                                          const uint16_t* s) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a[4] = {pack2<kBf16>(p[2 * kk][0], p[2 * kk][1]),
                           pack2<kBf16>(p[2 * kk][2], p[2 * kk][3]),
                           pack2<kBf16>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           pack2<kBf16>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(
          b, s + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kLds<D> + np * 16 + (lane / 16) * 8);
      mma<kBf16>(acc[2 * np], a, b[0], b[1]);
      mma<kBf16>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

template <int N>
__device__ STOKER_FORCEINLINE void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
}

// Writes a warp's 16 x D accumulator tile * mul to rows row0.. (< seq) of a [T, ld] matrix.
template <bool kBf16, int D>
__device__ STOKER_FORCEINLINE void store_rows(uint16_t* g, int64_t ld, int row0, int seq,
                                              const float (&acc)[D / 8][4], float mul0,
                                              float mul1) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + lane / 4 + half * 8;
    if (row >= seq) continue;
    const float mul = half ? mul1 : mul0;
    uint16_t* dst = g + static_cast<int64_t>(row) * ld + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(dst + n * 8) =
          pack2<kBf16>(acc[n][2 * half] * mul, acc[n][2 * half + 1] * mul);
  }
}

__device__ STOKER_FORCEINLINE float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(~0u, v, 1));
  return fmaxf(v, __shfl_xor_sync(~0u, v, 2));
}
__device__ STOKER_FORCEINLINE float quad_sum(float v) {
  v += __shfl_xor_sync(~0u, v, 1);
  return v + __shfl_xor_sync(~0u, v, 2);
}

// The shape every kernel is given, and where a head's data starts: a query head's columns in
// the packed qkv (and dqkv) and in [B, T, H D] tensors (out, dout) and its row in [B, H, T]
// ones (lse, delta); a kv head's k columns (its v columns are KV D further).
struct Geometry {
  int seq, heads, kv_heads;
  // Document starts [B, T] and per-query-tile minimum starts [B, tiles] (kDoc only).
  const int* doc_start;
  const int* tile_min;

  __device__ STOKER_FORCEINLINE int64_t ld() const {
    return static_cast<int64_t>(heads + 2 * kv_heads);  // times D by the caller
  }
};

template <int D>
struct Offsets {
  int64_t ld, ldo;  // row strides of qkv and out
  int64_t base;     // batch b's first qkv element
  int64_t obase;    // batch b's first out element
  __device__ STOKER_FORCEINLINE Offsets(const Geometry& g, int b)
      : ld(g.ld() * D),
        ldo(static_cast<int64_t>(g.heads) * D),
        base(static_cast<int64_t>(b) * g.seq * g.ld() * D),
        obase(static_cast<int64_t>(b) * g.seq * g.heads * D) {}
  __device__ STOKER_FORCEINLINE int64_t q(int h) const {
    return base + static_cast<int64_t>(h) * D;
  }
  __device__ STOKER_FORCEINLINE int64_t k(const Geometry& g, int kvh) const {
    return base + static_cast<int64_t>(g.heads + kvh) * D;
  }
  __device__ STOKER_FORCEINLINE int64_t v(const Geometry& g, int kvh) const {
    return base + static_cast<int64_t>(g.heads + g.kv_heads + kvh) * D;
  }
  __device__ STOKER_FORCEINLINE int64_t o(int h) const {
    return obase + static_cast<int64_t>(h) * D;
  }
};

// ---- document pre-pass ----

// start[b, i] = i - positions[b, i] clamped to [0, i] (a negative position sees only itself, one
// beyond i the whole prefix), and tile_min[b, t] = the minimum start of query tile t's rows.
// One block of 64 threads per (b, tile), grid-stride over B * tiles.
template <typename Index>
__global__ void __launch_bounds__(kTile)
    flash_doc_kernel(int* __restrict__ start, int* __restrict__ tile_min,
                     const Index* __restrict__ positions, int64_t batch, int seq, int tiles) {
  __shared__ int warp_min[kTile / 32];
  for (int64_t w = blockIdx.x; w < batch * tiles; w += gridDim.x) {
    const int64_t b = w / tiles;
    const int t = static_cast<int>(w % tiles);
    const int row = t * kTile + static_cast<int>(threadIdx.x);
    int s = INT_MAX;  // rows past T do not lower the tile's minimum
    if (row < seq) {
      const int64_t p = static_cast<int64_t>(positions[b * seq + row]);
      s = p < 0 ? row : p > row ? 0 : row - static_cast<int>(p);
      start[b * seq + row] = s;
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s = min(s, __shfl_xor_sync(~0u, s, off));
    if (threadIdx.x % 32 == 0) warp_min[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) tile_min[w] = min(warp_min[0], warp_min[1]);
    __syncthreads();  // warp_min is rewritten by the next item
  }
}

// ---- forward: grid (B*H, query tiles), the last (longest) query tiles first ----

// Dynamic shared memory: q, and K and V double-buffered.
template <int D>
constexpr int kForwardSmem = 5 * kTileBytes<D>;

template <bool kBf16, int D, bool kDoc>
__global__ void __launch_bounds__(kThreads, D == 64 ? 3 : 2)
    flash_forward_kernel(uint16_t* __restrict__ out, float* __restrict__ lse,
                         const uint16_t* __restrict__ qkv, Geometry geo, float scale_log2) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  // K and V double-buffered: tile kt + 1 is copied while tile kt is computed on.
  uint16_t* sq = reinterpret_cast<uint16_t*>(flash_smem);
  uint16_t* sk = sq + kTileElems<D>;      // buffer b at sk + b * kTileElems
  uint16_t* sv = sq + 3 * kTileElems<D>;  // buffer b at sv + b * kTileElems
  const int seq = geo.seq;
  const int bh = blockIdx.x, b = bh / geo.heads, h = bh % geo.heads;
  const Offsets<D> off(geo, b);
  const int kvh = h / (geo.heads / geo.kv_heads);
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t ld = off.ld;
  const uint16_t* q = qkv + off.q(h);
  const uint16_t* k = qkv + off.k(geo, kvh);
  const uint16_t* v = qkv + off.v(geo, kvh);
  const int qrow0 = qt * kTile + warp * 16 + lane / 4;  // this thread's rows: qrow0, qrow0 + 8

  int kt0 = 0;  // the first key tile any row of this query tile sees
  int row_start[2] = {0, 0};
  if constexpr (kDoc) {
    kt0 = geo.tile_min[static_cast<int64_t>(b) * gridDim.y + qt] / kTile;
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // rows past T see only themselves (a zero key): finite
      const int row = qrow0 + r * 8;
      row_start[r] = row < seq ? geo.doc_start[static_cast<int64_t>(b) * seq + row] : row;
    }
  }

  load_tile<D>(sq, q, ld, qt * kTile, seq);
  cp_async_commit();
  load_tile<D>(sk, k, ld, kt0 * kTile, seq);
  load_tile<D>(sv, v, ld, kt0 * kTile, seq);
  cp_async_commit();
  cp_async_wait<1>();  // q has landed; K/V tile kt0 may still be in flight
  __syncthreads();
  AFrags<D, true> qf;
  qf.load(sq, warp * 16);

  float o[D / 8][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int kt = kt0; kt <= qt; ++kt) {
    const int buf = (kt - kt0) & 1;
    if (kt < qt) {  // prefetch into the other buffer (released by the last iteration's barrier)
      load_tile<D>(sk + (buf ^ 1) * kTileElems<D>, k, ld, (kt + 1) * kTile, seq);
      load_tile<D>(sv + (buf ^ 1) * kTileElems<D>, v, ld, (kt + 1) * kTile, seq);
      cp_async_commit();
      cp_async_wait<1>();  // tile kt has landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* skt = sk + buf * kTileElems<D>;
    const uint16_t* svt = sv + buf * kTileElems<D>;
    float s[8][4];
    zero(s);
    mma_abt<kBf16, D>(s, qf, skt);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kt * kTile + n * 8 + (lane % 4) * 2 + (e & 1);
        const int row = qrow0 + (e / 2) * 8;
        float x = s[n][e] * scale_log2;
        if constexpr (kDoc) {
          if (key > row || key < row_start[e / 2]) x = -INFINITY;
        } else {
          if (kt == qt && key > row) x = -INFINITY;
        }
        s[n][e] = x;
        mx[e / 2] = fmaxf(mx[e / 2], x);
      }
    float alpha[2], mref[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mnew = fmaxf(m[r], quad_max(mx[r]));  // causal: finite, key kt*64 is visible
      // Documents: -inf while the row has seen nothing yet; exponents then use 0, giving
      // exp2(-inf) = 0 for both alpha and p instead of NaN.
      mref[r] = kDoc && mnew == -INFINITY ? 0.0f : mnew;
      alpha[r] = exp2f(m[r] - mref[r]);  // 0 on the first tile (m = -inf)
      m[r] = mnew;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[n][e] - mref[e / 2]);  // exp2(-inf) = 0 for masked keys
        s[n][e] = p;
        l[e / 2] += p;
      }
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] *= alpha[e / 2];
    mma_pm<kBf16, D>(o, s, svt);
    __syncthreads();  // buffer `buf` is refilled by the next iteration
  }
  const float l0 = quad_sum(l[0]), l1 = quad_sum(l[1]);
  store_rows<kBf16, D>(out + off.o(h), off.ldo, qt * kTile + warp * 16, seq, o, 1.0f / l0,
                       1.0f / l1);
  if (lane % 4 == 0) {
    float* lrow = lse + static_cast<int64_t>(bh) * seq;
    if (qrow0 < seq) lrow[qrow0] = (m[0] + log2f(l0)) * kLn2;
    if (qrow0 + 8 < seq) lrow[qrow0 + 8] = (m[1] + log2f(l1)) * kLn2;
  }
}

// ---- backward ----

// delta[b, h, t] = sum_d dO * O over one head row; one warp per (b, t, h), D / 32 elements a
// lane (one 32- or 64-bit load).
template <bool kBf16, int D>
__global__ void __launch_bounds__(256)
    flash_delta_kernel(float* __restrict__ delta, const uint16_t* __restrict__ dout,
                       const uint16_t* __restrict__ out, int64_t rows, int seq, int heads) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  if (r >= rows) return;  // uniform per warp
  const int lane = threadIdx.x % 32;
  constexpr int kPer = D / 32;
  const int64_t off = r * D + lane * kPer;  // row r of [B*T*H, D] is (b, t, h)
  float sum = 0.0f;
  if constexpr (kPer == 2) {
    const float2 a = unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(dout + off));
    const float2 o = unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(out + off));
    sum = a.x * o.x + a.y * o.y;
  } else {
    static_assert(kPer == 4, "head dim 64 or 128");
    const uint2 a2 = *reinterpret_cast<const uint2*>(dout + off);
    const uint2 o2 = *reinterpret_cast<const uint2*>(out + off);
    const float2 a = unpack2<kBf16>(a2.x), b = unpack2<kBf16>(a2.y);
    const float2 o = unpack2<kBf16>(o2.x), p = unpack2<kBf16>(o2.y);
    sum = a.x * o.x + a.y * o.y + b.x * p.x + b.y * p.y;
  }
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(~0u, sum, s);
  if (lane == 0) {
    const int h = static_cast<int>(r % heads);
    const int64_t bt = r / heads, b = bt / seq, t = bt % seq;
    delta[(b * heads + h) * seq + t] = sum;
  }
}

// Dynamic shared memory of the backward kernels (above the 48 KiB static limit, so the launcher
// raises the kernels' limit): six 64-row tiles, two of them double-buffered streams, plus the
// dK/dV kernel's double-buffered lse, delta and document-start rows.
template <int D>
constexpr int kDkdvSmem = 6 * kTileBytes<D> + 2 * kTile * 4 * 3;
template <int D>
constexpr int kDqSmem = 6 * kTileBytes<D>;

// dK, dV of one key tile of one kv head: grid (B*KV, key tiles), key tile 0 (the longest) first.
// Each warp owns 16 keys and computes, per query tile of each query head of the group, the
// transposed products S^T = K Q^T, dP^T = V dO^T. Query tiles (q, dO, lse, delta, starts) are
// double-buffered across the whole (head, tile) sequence: the next one is copied during this one.
template <bool kBf16, int D, bool kDoc>
__global__ void __launch_bounds__(kThreads, 2)
    flash_dkdv_kernel(uint16_t* __restrict__ dqkv, const uint16_t* __restrict__ dout,
                      const uint16_t* __restrict__ qkv, const float* __restrict__ lse,
                      const float* __restrict__ delta, Geometry geo, float scale,
                      float scale_log2) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  // Buffers b = 0, 1 of a stream lie one tile (or row) apart: sq + b * kTileElems, ...
  constexpr int kTe = kTileElems<D>;
  uint16_t* sk = reinterpret_cast<uint16_t*>(flash_smem);
  uint16_t* sv = sk + kTe;
  uint16_t* sq = sk + 2 * kTe;
  uint16_t* sdo = sk + 4 * kTe;
  float* slse = reinterpret_cast<float*>(sk + 6 * kTe);
  float* sdelta = slse + 2 * kTile;
  int* sstart = reinterpret_cast<int*>(sdelta + 2 * kTile);
  __shared__ int last_tile;
  const int seq = geo.seq;
  const int bg = blockIdx.x, b = bg / geo.kv_heads, kvh = bg % geo.kv_heads;
  const int group = geo.heads / geo.kv_heads, h0 = kvh * group;  // query heads h0..h0+group-1
  const Offsets<D> off(geo, b);
  const int kt = blockIdx.y, nq = gridDim.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t ld = off.ld, ldo = off.ldo;
  const uint16_t* k = qkv + off.k(geo, kvh);
  const uint16_t* v = qkv + off.v(geo, kvh);
  const int* tmin = kDoc ? geo.tile_min + static_cast<int64_t>(b) * nq : nullptr;
  const int last_key = kt * kTile + kTile - 1;

  // The last query tile to visit: all of them when causal; with documents, the last one whose
  // minimum start reaches this key tile (tiles between that see none of it are skipped below).
  int qt_end = nq - 1;
  if constexpr (kDoc) {
    if (threadIdx.x == 0) last_tile = kt;  // the diagonal tile always sees its own keys
    __syncthreads();
    int mine = kt;
    for (int t = kt + 1 + threadIdx.x; t < nq; t += kThreads)
      if (tmin[t] <= last_key) mine = t;
    atomicMax(&last_tile, mine);
    __syncthreads();
    qt_end = last_tile;
  }
  // The query tile after qt that sees some key of this tile (qt_end + 1 when none is left).
  auto next_tile = [&](int qt) {
    ++qt;
    if constexpr (kDoc) {
      while (qt <= qt_end && tmin[qt] > last_key) ++qt;
    }
    return qt;
  };

  // Query tile qt of group head j into buffer `buf`: q and dO by cp.async (the caller commits),
  // lse, delta and starts by plain stores (visible after the caller's next barrier).
  auto load_query_tile = [&](int j, int qt, int buf) {
    const int h = h0 + j;
    load_tile<D>(sq + buf * kTe, qkv + off.q(h), ld, qt * kTile, seq);
    load_tile<D>(sdo + buf * kTe, dout + off.o(h), ldo, qt * kTile, seq);
    if (threadIdx.x < kTile) {
      const int row = qt * kTile + threadIdx.x;
      const int64_t lrow = (static_cast<int64_t>(b) * geo.heads + h) * seq;
      // Rows past T: P = exp2(.. - inf) = 0, so they add nothing (their q and dO are zeros too).
      slse[buf * kTile + threadIdx.x] = row < seq ? lse[lrow + row] * kLog2e : INFINITY;
      sdelta[buf * kTile + threadIdx.x] = row < seq ? delta[lrow + row] : 0.0f;
      if constexpr (kDoc)
        sstart[buf * kTile + threadIdx.x] =
            row < seq ? geo.doc_start[static_cast<int64_t>(b) * seq + row] : 0;
    }
  };

  load_tile<D>(sk, k, ld, kt * kTile, seq);
  load_tile<D>(sv, v, ld, kt * kTile, seq);
  cp_async_commit();
  load_query_tile(0, kt, 0);
  cp_async_commit();
  cp_async_wait<1>();  // k and v have landed
  __syncthreads();
  constexpr bool kRegs = D == 64;  // D = 128: re-read from shared memory (header comment)
  AFrags<D, kRegs> kf, vf;
  kf.load(sk, warp * 16);
  vf.load(sv, warp * 16);

  float dk[D / 8][4], dv[D / 8][4];
  zero(dk);
  zero(dv);
  const int key0 = kt * kTile + warp * 16 + lane / 4;  // this thread's keys: key0, key0 + 8
  int j = 0, qt = kt, buf = 0;
  while (true) {
    int nj = j, nqt = next_tile(qt);
    if (nqt > qt_end) {  // this head is done: the group's next head from the diagonal tile
      ++nj;
      nqt = kt;
    }
    const bool more = nj < group;
    if (more) {  // prefetch into the other buffer (released by the last iteration's barrier)
      load_query_tile(nj, nqt, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();  // tile qt has landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* sqt = sq + buf * kTe;
    const uint16_t* sdot = sdo + buf * kTe;
    const float* lse_t = slse + buf * kTile;
    const float* delta_t = sdelta + buf * kTile;
    const int* start_t = sstart + buf * kTile;
    float p[8][4], dp[8][4];
    zero(p);
    mma_abt<kBf16, D>(p, kf, sqt);  // S^T [16 keys x 64 queries]
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + (lane % 4) * 2 + (e & 1);
        const int key = key0 + (e / 2) * 8, query = qt * kTile + col;
        bool masked;
        if constexpr (kDoc) {
          masked = key > query || key < start_t[col];
        } else {
          masked = qt == kt && key > query;
        }
        p[n][e] = masked ? 0.0f : exp2f(p[n][e] * scale_log2 - lse_t[col]);
      }
    mma_pm<kBf16, D>(dv, p, sdot);  // dV += P^T dO
    zero(dp);
    mma_abt<kBf16, D>(dp, vf, sdot);  // dP^T = V dO^T
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + (lane % 4) * 2 + (e & 1);
        dp[n][e] = p[n][e] * (dp[n][e] - delta_t[col]);  // dS^T (unscaled)
      }
    mma_pm<kBf16, D>(dk, dp, sqt);  // dK += dS^T Q
    __syncthreads();                // buffer `buf` is refilled by the next iteration
    if (!more) break;
    j = nj, qt = nqt, buf ^= 1;
  }
  store_rows<kBf16, D>(dqkv + off.k(geo, kvh), ld, kt * kTile + warp * 16, seq, dk, scale, scale);
  store_rows<kBf16, D>(dqkv + off.v(geo, kvh), ld, kt * kTile + warp * 16, seq, dv, 1.0f, 1.0f);
}

// dQ of one query tile of one query head: grid (B*H, query tiles), the longest first; recomputes
// P and dP per key tile as the forward does. Key tiles (k, v) are double-buffered.
template <bool kBf16, int D, bool kDoc>
__global__ void __launch_bounds__(kThreads, 2)
    flash_dq_kernel(uint16_t* __restrict__ dqkv, const uint16_t* __restrict__ dout,
                    const uint16_t* __restrict__ qkv, const float* __restrict__ lse,
                    const float* __restrict__ delta, Geometry geo, float scale, float scale_log2) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  constexpr int kTe = kTileElems<D>;  // buffer b of k (v) at sk + b * kTe
  uint16_t* sq = reinterpret_cast<uint16_t*>(flash_smem);
  uint16_t* sdo = sq + kTe;
  uint16_t* sk = sq + 2 * kTe;
  uint16_t* sv = sq + 4 * kTe;
  const int seq = geo.seq;
  const int bh = blockIdx.x, b = bh / geo.heads, h = bh % geo.heads;
  const Offsets<D> off(geo, b);
  const int kvh = h / (geo.heads / geo.kv_heads);
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t ld = off.ld;
  const uint16_t* q = qkv + off.q(h);
  const uint16_t* k = qkv + off.k(geo, kvh);
  const uint16_t* v = qkv + off.v(geo, kvh);
  const int qrow0 = qt * kTile + warp * 16 + lane / 4;  // this thread's rows: qrow0, qrow0 + 8

  int kt0 = 0;
  int row_start[2] = {0, 0};
  if constexpr (kDoc) {
    kt0 = geo.tile_min[static_cast<int64_t>(b) * gridDim.y + qt] / kTile;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = qrow0 + r * 8;
      row_start[r] = row < seq ? geo.doc_start[static_cast<int64_t>(b) * seq + row] : row;
    }
  }

  load_tile<D>(sq, q, ld, qt * kTile, seq);
  load_tile<D>(sdo, dout + off.o(h), off.ldo, qt * kTile, seq);
  cp_async_commit();
  load_tile<D>(sk, k, ld, kt0 * kTile, seq);
  load_tile<D>(sv, v, ld, kt0 * kTile, seq);
  cp_async_commit();
  cp_async_wait<1>();  // q and dO have landed
  __syncthreads();
  constexpr bool kRegs = D == 64;
  AFrags<D, kRegs> qf, dof;
  qf.load(sq, warp * 16);
  dof.load(sdo, warp * 16);
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = qrow0 + r * 8;
    const bool live = row < seq;  // rows past T are computed on zeros and not stored
    const int64_t at = static_cast<int64_t>(bh) * seq + row;
    row_lse[r] = live ? lse[at] * kLog2e : 0.0f;
    row_delta[r] = live ? delta[at] : 0.0f;
  }

  float dq[D / 8][4];
  zero(dq);
  for (int kt = kt0; kt <= qt; ++kt) {
    const int buf = (kt - kt0) & 1;
    if (kt < qt) {  // prefetch into the other buffer (released by the last iteration's barrier)
      load_tile<D>(sk + (buf ^ 1) * kTe, k, ld, (kt + 1) * kTile, seq);
      load_tile<D>(sv + (buf ^ 1) * kTe, v, ld, (kt + 1) * kTile, seq);
      cp_async_commit();
      cp_async_wait<1>();  // tile kt has landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* skt = sk + buf * kTe;
    float p[8][4], dp[8][4];
    zero(p);
    mma_abt<kBf16, D>(p, qf, skt);  // S
    zero(dp);
    mma_abt<kBf16, D>(dp, dof, sv + buf * kTe);  // dP = dO V^T
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kt * kTile + n * 8 + (lane % 4) * 2 + (e & 1);
        const int row = qrow0 + (e / 2) * 8;
        bool masked;
        if constexpr (kDoc) {
          masked = key > row || key < row_start[e / 2];
        } else {
          masked = kt == qt && key > row;
        }
        const float pv = masked ? 0.0f : exp2f(p[n][e] * scale_log2 - row_lse[e / 2]);
        dp[n][e] = pv * (dp[n][e] - row_delta[e / 2]);  // dS (unscaled)
      }
    mma_pm<kBf16, D>(dq, dp, skt);  // dQ += dS K
    __syncthreads();                // buffer `buf` is refilled by the next iteration
  }
  store_rows<kBf16, D>(dqkv + off.q(h), ld, qt * kTile + warp * 16, seq, dq, scale, scale);
}

// Raises kKernel's dynamic shared memory limit to `bytes`, once per kernel and device (the
// attribute is per device; the current device is `device`).
template <auto kKernel>
void allow_smem(int bytes, int device) {
  static std::array<std::atomic<bool>, 64> done{};
  if (device < 0 || device >= 64 || done[device].load(std::memory_order_acquire)) return;
  STOKER_CUDA_CHECK(
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done[device].store(true, std::memory_order_release);
}

// Calls f(bf16, D, doc) with compile-time constants for the runtime dtype, head dim and mask.
template <typename F>
void visit(DType dt, int64_t head_dim, bool doc, F&& f) {
  STOKER_CHECK(dt == DType::bf16 || dt == DType::f16, "internal: flash attention on ",
               dtype_name(dt));
  STOKER_CHECK(head_dim == 64 || head_dim == 128, "internal: flash attention head dim ", head_dim);
  auto with_doc = [&](auto bf, auto d) {
    if (doc) return f(bf, d, std::true_type{});
    return f(bf, d, std::false_type{});
  };
  auto with_d = [&](auto bf) {
    if (head_dim == 64) return with_doc(bf, std::integral_constant<int, 64>{});
    return with_doc(bf, std::integral_constant<int, 128>{});
  };
  if (dt == DType::bf16) return with_d(std::true_type{});
  return with_d(std::false_type{});
}

int64_t tile_count(int64_t seq) { return (seq + kTile - 1) / kTile; }

dim3 tile_grid(int64_t rows, int64_t seq) {
  const int64_t tiles = tile_count(seq);
  STOKER_CHECK(rows <= 0x7fffffff && tiles <= 65535,
               "internal: flash attention grid out of range (validated by the caller)");
  return dim3(static_cast<unsigned>(rows), static_cast<unsigned>(tiles));
}

const uint16_t* cptr(const Tensor& t) { return static_cast<const uint16_t*>(t.data()); }
uint16_t* mptr(const Tensor& t) { return static_cast<uint16_t*>(t.data()); }

// The geometry of a call; with positions, runs the document pre-pass into `scratch` (i32
// [B * T + B * tiles], kept alive by the caller until its kernels are enqueued: the caching
// allocator orders its reuse on the stream).
Geometry make_geometry(const Tensor& positions, Tensor& scratch, int64_t batch, int64_t seq,
                       int64_t heads, int64_t kv_heads, cudaStream_t stream, int device) {
  Geometry g{static_cast<int>(seq), static_cast<int>(heads), static_cast<int>(kv_heads), nullptr,
             nullptr};
  if (!positions.defined()) return g;
  const int64_t tiles = tile_count(seq);
  scratch = Tensor::empty({batch * seq + batch * tiles}, DType::i32, positions.device());
  int* start = static_cast<int*>(scratch.data());
  int* tmin = start + batch * seq;
  const unsigned blocks = static_cast<unsigned>(
      std::min<int64_t>(batch * tiles, static_cast<int64_t>(sm_count(device)) * 32));
  if (positions.dtype() == DType::i64) {
    flash_doc_kernel<int64_t>
        <<<blocks, kTile, 0, stream>>>(start, tmin, static_cast<const int64_t*>(positions.data()),
                                       batch, g.seq, static_cast<int>(tiles));
  } else {
    STOKER_CHECK(positions.dtype() == DType::i32, "internal: flash attention positions dtype");
    flash_doc_kernel<int32_t>
        <<<blocks, kTile, 0, stream>>>(start, tmin, static_cast<const int32_t*>(positions.data()),
                                       batch, g.seq, static_cast<int>(tiles));
  }
  STOKER_CUDA_CHECK(cudaGetLastError());
  g.doc_start = start;
  g.tile_min = tmin;
  return g;
}

}  // namespace

void flash_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             const Tensor& positions, int64_t batch, int64_t seq, int64_t heads,
                             int64_t kv_heads, int64_t head_dim, float scale) {
  const int device = qkv.device().index;
  const core::DeviceScope scope(device);
  const cudaStream_t stream = core::cuda_stream(qkv.device());
  Tensor scratch;
  const Geometry geo =
      make_geometry(positions, scratch, batch, seq, heads, kv_heads, stream, device);
  visit(qkv.dtype(), head_dim, positions.defined(), [&](auto bf, auto d, auto doc) {
    constexpr bool kBf16 = decltype(bf)::value, kDoc = decltype(doc)::value;
    constexpr int D = decltype(d)::value;
    constexpr auto kernel = flash_forward_kernel<kBf16, D, kDoc>;
    allow_smem<kernel>(kForwardSmem<D>, device);
    kernel<<<tile_grid(batch * heads, seq), kThreads, kForwardSmem<D>, stream>>>(
        mptr(out), static_cast<float*>(lse.data()), cptr(qkv), geo, scale * kLog2e);
    STOKER_CUDA_CHECK(cudaGetLastError());
  });
}

void flash_attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const Tensor& positions,
                              const Tensor& delta, int64_t batch, int64_t seq, int64_t heads,
                              int64_t kv_heads, int64_t head_dim, float scale) {
  const int device = qkv.device().index;
  const core::DeviceScope scope(device);
  const cudaStream_t stream = core::cuda_stream(qkv.device());
  Tensor scratch;
  const Geometry geo =
      make_geometry(positions, scratch, batch, seq, heads, kv_heads, stream, device);
  visit(qkv.dtype(), head_dim, positions.defined(), [&](auto bf, auto d, auto doc) {
    constexpr bool kBf16 = decltype(bf)::value, kDoc = decltype(doc)::value;
    constexpr int D = decltype(d)::value;
    const int64_t rows = batch * seq * heads;
    flash_delta_kernel<kBf16, D><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
        static_cast<float*>(delta.data()), cptr(dout), cptr(out), rows, geo.seq, geo.heads);
    STOKER_CUDA_CHECK(cudaGetLastError());
    const float* l = static_cast<const float*>(lse.data());
    const float* dl = static_cast<const float*>(delta.data());
    constexpr auto dkdv = flash_dkdv_kernel<kBf16, D, kDoc>;
    allow_smem<dkdv>(kDkdvSmem<D>, device);
    dkdv<<<tile_grid(batch * kv_heads, seq), kThreads, kDkdvSmem<D>, stream>>>(
        mptr(dqkv), cptr(dout), cptr(qkv), l, dl, geo, scale, scale * kLog2e);
    STOKER_CUDA_CHECK(cudaGetLastError());
    constexpr auto dq = flash_dq_kernel<kBf16, D, kDoc>;
    allow_smem<dq>(kDqSmem<D>, device);
    dq<<<tile_grid(batch * heads, seq), kThreads, kDqSmem<D>, stream>>>(
        mptr(dqkv), cptr(dout), cptr(qkv), l, dl, geo, scale, scale * kLog2e);
    STOKER_CUDA_CHECK(cudaGetLastError());
  });
}

STOKER_REGISTER_STUB(flash_attention_forward, flash_attention_forward);
STOKER_REGISTER_STUB(flash_attention_backward, flash_attention_backward);

}  // namespace stoker::ops::cuda
