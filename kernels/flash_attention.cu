// Fused causal attention (FlashAttention-2 style) for head_dim 64, bf16 / f16 with fp32
// accumulation: ops/flash_attention.h. The T x T scores never reach memory.
//
// Tiles: a CTA of 4 warps owns 64 rows (queries in the forward and dQ kernels, keys in the dK/dV
// kernel), 16 per warp; the other side streams through shared memory in tiles of 64 rows. q, k
// and v are read straight from the packed qkv [B, T, 3C] (row stride 3C, head offset h * 64):
// each 128-byte head row is 8 cp.async 16-byte chunks; rows past T are zero-filled by the copy
// (src-size 0), so tails need no separate path. Shared rows are padded to 72 elements (144
// bytes) so the 8 row addresses of an ldmatrix fall in distinct banks.
//
// Math: mma.sync.m16n8k16 (row.col, 16-bit inputs, f32 accumulators) fed by ldmatrix. Register
// layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4 g + t; an f32 accumulator
// tile 16x8 holds (g, 2t..2t+1) in c0,c1 and (g+8, 2t..2t+1) in c2,c3; an A tile 16x16 holds
// (g, 2t), (g+8, 2t), (g, 2t+8), (g+8, 2t+8) pairs in a0..a3, which is why two neighbouring
// accumulator tiles of P (or dS) repack into one A fragment without any shuffle; a B tile 16x8
// ("col") holds (k = 2t..2t+1, n = g) in b0 and k + 8 in b1: ldmatrix of a row-major [n][k]
// matrix gives it directly, of a row-major [k][n] matrix with .trans.
//
// Causality: a query tile i only visits key tiles 0..i (tiles above the diagonal are skipped);
// the diagonal tile masks key > query. Key 0 is visible to every query, so each row's running
// max is finite after the first tile (no inf - inf).
//
// Softmax in fp32 in base 2: scores are multiplied by scale * log2(e) once, exp2f thereafter;
// lse is stored in natural log of the scaled scores (lse = ln sum_j exp(s_ij / sqrt(D))), as the
// reference defines it. P is rounded to the input dtype only as an mma operand.
//
// Backward (FA2): delta = rowsum(dO * O) by a small kernel; dK, dV by a CTA per key tile that
// iterates over query tiles i >= j recomputing P^T = exp(K Q^T * scale - lse); dQ by a CTA per
// query tile iterating over key tiles j <= i (same recomputation). No atomics: every element of
// dqkv is written once, by one thread, and results are the same run to run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernel_util.cuh"
#include "ops/flash_attention_stubs.h"

namespace stoker::ops::cuda {

namespace {

constexpr int kD = 64;                 // head dim
constexpr int kTile = 64;              // rows per tile (both sides)
constexpr int kWarps = 4;              // 16 rows per warp
constexpr int kThreads = 32 * kWarps;  // 128
constexpr int kLds = kD + 8;           // shared row stride in elements (144 bytes)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

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

// Rows row0..row0+63 of a [T, ld] matrix (columns col..col+63 of each) into shared [64][kLds];
// rows >= seq are zeros. Issues cp.async only (the caller waits).
__device__ STOKER_FORCEINLINE void load_tile(uint16_t* s, const uint16_t* g, int64_t ld, int row0,
                                             int seq) {
#pragma unroll
  for (int i = 0; i < kTile * kD / 8 / kThreads; ++i) {  // 4 chunks of 16 bytes per thread
    const int chunk = threadIdx.x + i * kThreads;
    const int r = chunk / (kD / 8), c = chunk % (kD / 8);
    const bool valid = row0 + r < seq;
    const uint16_t* src = g + (valid ? static_cast<int64_t>(row0 + r) * ld : 0) + c * 8;
    cp_async16(s + r * kLds + c * 8, src, valid);
  }
}

// A fragments (16 x 64, 4 k-steps) of rows row0..row0+15 of a shared tile.
__device__ STOKER_FORCEINLINE void load_a(uint32_t (&a)[4][4], const uint16_t* s, int row0) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
    ldmatrix_x4(a[ks], s + (row0 + lane % 16) * kLds + ks * 16 + (lane / 16) * 8);
}

// acc[16 x 64] += A[16 x 64] * M^T where M is a shared [64 rows][64] tile ("rows as columns":
// q k^T, dO v^T, k q^T, v dO^T).
template <bool kBf16>
__device__ STOKER_FORCEINLINE void mma_abt(float (&acc)[8][4], const uint32_t (&a)[4][4],
                                           const uint16_t* s) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int ks = 0; ks < 4; ++ks)
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      ldmatrix_x4(
          b, s + (np * 16 + lane % 8 + (lane / 16) * 8) * kLds + ks * 16 + ((lane / 8) % 2) * 8);
      mma<kBf16>(acc[2 * np], a[ks], b[0], b[1]);
      mma<kBf16>(acc[2 * np + 1], a[ks], b[2], b[3]);
    }
}

// acc[16 x 64] += P[16 x 64] * M where P is an accumulator-layout tile (rounded here) and M a
// shared [64][64] tile (P v, dS k, P^T dO, dS^T q).
template <bool kBf16>
__device__ STOKER_FORCEINLINE void mma_pm(float (&acc)[8][4], const float (&p)[8][4],
                                          const uint16_t* s) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint32_t a[4] = {pack2<kBf16>(p[2 * kk][0], p[2 * kk][1]),
                           pack2<kBf16>(p[2 * kk][2], p[2 * kk][3]),
                           pack2<kBf16>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                           pack2<kBf16>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(
          b, s + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kLds + np * 16 + (lane / 16) * 8);
      mma<kBf16>(acc[2 * np], a, b[0], b[1]);
      mma<kBf16>(acc[2 * np + 1], a, b[2], b[3]);
    }
  }
}

__device__ STOKER_FORCEINLINE void zero(float (&acc)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
}

// Writes a warp's 16 x 64 accumulator tile * mul to rows row0.. (< seq) of a [T, ld] matrix.
template <bool kBf16>
__device__ STOKER_FORCEINLINE void store_rows(uint16_t* g, int64_t ld, int row0, int seq,
                                              const float (&acc)[8][4], float mul0, float mul1) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + lane / 4 + half * 8;
    if (row >= seq) continue;
    const float mul = half ? mul1 : mul0;
    uint16_t* dst = g + static_cast<int64_t>(row) * ld + (lane % 4) * 2;
#pragma unroll
    for (int n = 0; n < 8; ++n)
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

// The head a block works on (blockIdx.x = b * heads + h) and where its data starts: its q
// columns in the packed [B, T, 3C] qkv (and dqkv), its columns in [B, T, C] tensors (out, dout)
// and its row in [B, H, T] ones (lse, delta).
struct HeadOffsets {
  int64_t c, ld;     // C and the packed row stride 3C
  int64_t packed;    // qkv / dqkv
  int64_t unpacked;  // out / dout
  int64_t rows;      // lse / delta
};
__device__ STOKER_FORCEINLINE HeadOffsets head_offsets(int seq, int heads) {
  const int bh = blockIdx.x, b = bh / heads, h = bh % heads;
  const int64_t c = static_cast<int64_t>(heads) * kD;
  return {c, 3 * c, static_cast<int64_t>(b) * seq * 3 * c + h * kD,
          static_cast<int64_t>(b) * seq * c + h * kD, static_cast<int64_t>(bh) * seq};
}

// ---- forward: grid (B*H, query tiles), the last (longest) query tiles first ----

template <bool kBf16>
__global__ void __launch_bounds__(kThreads, 3)
    flash_forward_kernel(uint16_t* __restrict__ out, float* __restrict__ lse,
                         const uint16_t* __restrict__ qkv, int seq, int heads, float scale_log2) {
  // K and V double-buffered: tile kt + 1 is copied while tile kt is computed on.
  __shared__ alignas(16) uint16_t sq[kTile * kLds];
  __shared__ alignas(16) uint16_t sk[2][kTile * kLds];
  __shared__ alignas(16) uint16_t sv[2][kTile * kLds];
  const HeadOffsets hd = head_offsets(seq, heads);
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = hd.c, ld = hd.ld;
  const uint16_t* q = qkv + hd.packed;
  const uint16_t* k = q + c;
  const uint16_t* v = q + 2 * c;

  load_tile(sq, q, ld, qt * kTile, seq);
  cp_async_commit();
  load_tile(sk[0], k, ld, 0, seq);
  load_tile(sv[0], v, ld, 0, seq);
  cp_async_commit();
  cp_async_wait<1>();  // q has landed; K/V tile 0 may still be in flight
  __syncthreads();
  uint32_t qf[4][4];
  load_a(qf, sq, warp * 16);

  float o[8][4];
  zero(o);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int qrow0 = qt * kTile + warp * 16 + lane / 4;  // this thread's rows: qrow0, qrow0 + 8
  for (int kt = 0; kt <= qt; ++kt) {
    const int buf = kt & 1;
    if (kt < qt) {  // prefetch into the other buffer (released by the last iteration's barrier)
      load_tile(sk[buf ^ 1], k, ld, (kt + 1) * kTile, seq);
      load_tile(sv[buf ^ 1], v, ld, (kt + 1) * kTile, seq);
      cp_async_commit();
      cp_async_wait<1>();  // tile kt has landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* skt = sk[buf];
    const uint16_t* svt = sv[buf];
    float s[8][4];
    zero(s);
    mma_abt<kBf16>(s, qf, skt);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kt * kTile + n * 8 + (lane % 4) * 2 + (e & 1);
        float x = s[n][e] * scale_log2;
        if (kt == qt && key > qrow0 + (e / 2) * 8) x = -INFINITY;
        s[n][e] = x;
        mx[e / 2] = fmaxf(mx[e / 2], x);
      }
    float alpha[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mnew = fmaxf(m[r], quad_max(mx[r]));  // finite: key kt*64 <= query is visible
      alpha[r] = exp2f(m[r] - mnew);                    // 0 on the first tile (m = -inf)
      m[r] = mnew;
      l[r] *= alpha[r];
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float p = exp2f(s[n][e] - m[e / 2]);  // exp2(-inf) = 0 for masked keys
        s[n][e] = p;
        l[e / 2] += p;
        o[n][e] *= alpha[e / 2];
      }
    mma_pm<kBf16>(o, s, svt);
    __syncthreads();  // buffer `buf` is refilled by the next iteration
  }
  const float l0 = quad_sum(l[0]), l1 = quad_sum(l[1]);
  store_rows<kBf16>(out + hd.unpacked, c, qt * kTile + warp * 16, seq, o, 1.0f / l0, 1.0f / l1);
  if (lane % 4 == 0) {
    float* lrow = lse + hd.rows;
    if (qrow0 < seq) lrow[qrow0] = (m[0] + log2f(l0)) * kLn2;
    if (qrow0 + 8 < seq) lrow[qrow0 + 8] = (m[1] + log2f(l1)) * kLn2;
  }
}

// ---- backward ----

// delta[b, h, t] = sum_d dO * O over one head row; one warp per (b, t, h), 2 elements a lane.
template <bool kBf16>
__global__ void __launch_bounds__(256)
    flash_delta_kernel(float* __restrict__ delta, const uint16_t* __restrict__ dout,
                       const uint16_t* __restrict__ out, int64_t rows, int seq, int heads) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  if (r >= rows) return;  // uniform per warp
  const int lane = threadIdx.x % 32;
  const int64_t off = r * kD + lane * 2;  // row r of [B*T*H, 64] is (b, t, h)
  const float2 a = unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(dout + off));
  const float2 o = unpack2<kBf16>(*reinterpret_cast<const uint32_t*>(out + off));
  float sum = a.x * o.x + a.y * o.y;
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
// dK/dV kernel's lse and delta rows.
constexpr int kTileBytes = kTile * kLds * 2;
constexpr int kDkdvSmem = 6 * kTileBytes + 4 * kTile * 4;
constexpr int kDqSmem = 6 * kTileBytes;

// dK, dV of one key tile: grid (B*H, key tiles), key tile 0 (the longest) first. Each warp owns
// 16 keys and computes, per query tile, the transposed products S^T = K Q^T, dP^T = V dO^T.
// Query tiles (q, dO, lse, delta) are double-buffered: tile qt + 1 is copied during tile qt.
template <bool kBf16>
__global__ void __launch_bounds__(kThreads, 2)
    flash_dkdv_kernel(uint16_t* __restrict__ dqkv, const uint16_t* __restrict__ dout,
                      const uint16_t* __restrict__ qkv, const float* __restrict__ lse,
                      const float* __restrict__ delta, int seq, int heads, float scale,
                      float scale_log2) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  // Buffers b = 0, 1 of a stream lie one tile (or row) apart: sq + b * kTileElems, ...
  constexpr int kTileElems = kTile * kLds;
  uint16_t* sk = reinterpret_cast<uint16_t*>(flash_smem);
  uint16_t* sv = sk + kTileElems;
  uint16_t* sq = sk + 2 * kTileElems;
  uint16_t* sdo = sk + 4 * kTileElems;
  float* slse = reinterpret_cast<float*>(sk + 6 * kTileElems);
  float* sdelta = slse + 2 * kTile;
  const HeadOffsets hd = head_offsets(seq, heads);
  const int kt = blockIdx.y, nq = gridDim.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = hd.c, ld = hd.ld;
  const uint16_t* q = qkv + hd.packed;
  const uint16_t* k = q + c;
  const uint16_t* v = q + 2 * c;
  const uint16_t* d_o = dout + hd.unpacked;
  const float* lrow = lse + hd.rows;
  const float* drow = delta + hd.rows;
  // Query tile qt into buffer `buf`: q and dO by cp.async (the caller commits), lse and delta by
  // plain stores (visible after the caller's next barrier).
  auto load_query_tile = [&](int qt, int buf) {
    load_tile(sq + buf * kTileElems, q, ld, qt * kTile, seq);
    load_tile(sdo + buf * kTileElems, d_o, c, qt * kTile, seq);
    if (threadIdx.x < kTile) {
      const int row = qt * kTile + threadIdx.x;
      // Rows past T: P = exp2(.. - inf) = 0, so they add nothing (their q and dO are zeros too).
      slse[buf * kTile + threadIdx.x] = row < seq ? lrow[row] * kLog2e : INFINITY;
      sdelta[buf * kTile + threadIdx.x] = row < seq ? drow[row] : 0.0f;
    }
  };

  load_tile(sk, k, ld, kt * kTile, seq);
  load_tile(sv, v, ld, kt * kTile, seq);
  cp_async_commit();
  load_query_tile(kt, 0);
  cp_async_commit();
  cp_async_wait<1>();  // k and v have landed
  __syncthreads();
  uint32_t kf[4][4], vf[4][4];
  load_a(kf, sk, warp * 16);
  load_a(vf, sv, warp * 16);

  float dk[8][4], dv[8][4];
  zero(dk);
  zero(dv);
  const int key0 = kt * kTile + warp * 16 + lane / 4;  // this thread's keys: key0, key0 + 8
  for (int qt = kt; qt < nq; ++qt) {
    const int buf = (qt - kt) & 1;
    if (qt + 1 < nq) {  // prefetch into the other buffer (released by the last iteration's barrier)
      load_query_tile(qt + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();  // tile qt has landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* sqt = sq + buf * kTileElems;
    const uint16_t* sdot = sdo + buf * kTileElems;
    const float* lse_t = slse + buf * kTile;
    const float* delta_t = sdelta + buf * kTile;
    float p[8][4], dp[8][4];
    zero(p);
    mma_abt<kBf16>(p, kf, sqt);  // S^T [16 keys x 64 queries]
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + (lane % 4) * 2 + (e & 1);
        const bool masked = qt == kt && key0 + (e / 2) * 8 > qt * kTile + col;
        p[n][e] = masked ? 0.0f : exp2f(p[n][e] * scale_log2 - lse_t[col]);
      }
    mma_pm<kBf16>(dv, p, sdot);  // dV += P^T dO
    zero(dp);
    mma_abt<kBf16>(dp, vf, sdot);  // dP^T = V dO^T
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + (lane % 4) * 2 + (e & 1);
        dp[n][e] = p[n][e] * (dp[n][e] - delta_t[col]);  // dS^T (unscaled)
      }
    mma_pm<kBf16>(dk, dp, sqt);  // dK += dS^T Q
    __syncthreads();             // buffer `buf` is refilled by the next iteration
  }
  uint16_t* dst = dqkv + hd.packed;
  store_rows<kBf16>(dst + c, ld, kt * kTile + warp * 16, seq, dk, scale, scale);
  store_rows<kBf16>(dst + 2 * c, ld, kt * kTile + warp * 16, seq, dv, 1.0f, 1.0f);
}

// dQ of one query tile: grid (B*H, query tiles), the longest first; recomputes P and dP per key
// tile as the forward does. Key tiles (k, v) are double-buffered.
template <bool kBf16>
__global__ void __launch_bounds__(kThreads, 2)
    flash_dq_kernel(uint16_t* __restrict__ dqkv, const uint16_t* __restrict__ dout,
                    const uint16_t* __restrict__ qkv, const float* __restrict__ lse,
                    const float* __restrict__ delta, int seq, int heads, float scale,
                    float scale_log2) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  constexpr int kTileElems = kTile * kLds;  // buffer b of k (v) at sk + b * kTileElems
  uint16_t* sq = reinterpret_cast<uint16_t*>(flash_smem);
  uint16_t* sdo = sq + kTileElems;
  uint16_t* sk = sq + 2 * kTileElems;
  uint16_t* sv = sq + 4 * kTileElems;
  const HeadOffsets hd = head_offsets(seq, heads);
  const int qt = gridDim.y - 1 - blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = hd.c, ld = hd.ld;
  const uint16_t* q = qkv + hd.packed;
  const uint16_t* k = q + c;
  const uint16_t* v = q + 2 * c;
  const uint16_t* d_o = dout + hd.unpacked;

  load_tile(sq, q, ld, qt * kTile, seq);
  load_tile(sdo, d_o, c, qt * kTile, seq);
  cp_async_commit();
  load_tile(sk, k, ld, 0, seq);
  load_tile(sv, v, ld, 0, seq);
  cp_async_commit();
  cp_async_wait<1>();  // q and dO have landed
  __syncthreads();
  uint32_t qf[4][4], dof[4][4];
  load_a(qf, sq, warp * 16);
  load_a(dof, sdo, warp * 16);
  const int qrow0 = qt * kTile + warp * 16 + lane / 4;  // this thread's rows: qrow0, qrow0 + 8
  float row_lse[2], row_delta[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = qrow0 + r * 8;
    const bool live = row < seq;  // rows past T are computed on zeros and not stored
    row_lse[r] = live ? lse[hd.rows + row] * kLog2e : 0.0f;
    row_delta[r] = live ? delta[hd.rows + row] : 0.0f;
  }

  float dq[8][4];
  zero(dq);
  for (int kt = 0; kt <= qt; ++kt) {
    const int buf = kt & 1;
    if (kt < qt) {  // prefetch into the other buffer (released by the last iteration's barrier)
      load_tile(sk + (buf ^ 1) * kTileElems, k, ld, (kt + 1) * kTile, seq);
      load_tile(sv + (buf ^ 1) * kTileElems, v, ld, (kt + 1) * kTile, seq);
      cp_async_commit();
      cp_async_wait<1>();  // tile kt has landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const uint16_t* skt = sk + buf * kTileElems;
    float p[8][4], dp[8][4];
    zero(p);
    mma_abt<kBf16>(p, qf, skt);  // S
    zero(dp);
    mma_abt<kBf16>(dp, dof, sv + buf * kTileElems);  // dP = dO V^T
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = kt * kTile + n * 8 + (lane % 4) * 2 + (e & 1);
        const bool masked = kt == qt && key > qrow0 + (e / 2) * 8;
        const float pv = masked ? 0.0f : exp2f(p[n][e] * scale_log2 - row_lse[e / 2]);
        dp[n][e] = pv * (dp[n][e] - row_delta[e / 2]);  // dS (unscaled)
      }
    mma_pm<kBf16>(dq, dp, skt);  // dQ += dS K
    __syncthreads();             // buffer `buf` is refilled by the next iteration
  }
  uint16_t* dst = dqkv + hd.packed;
  store_rows<kBf16>(dst, ld, qt * kTile + warp * 16, seq, dq, scale, scale);
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

template <typename F>
void visit_half(DType dt, F&& f) {
  if (dt == DType::bf16) return f(std::true_type{});
  STOKER_CHECK(dt == DType::f16, "internal: flash attention on ", dtype_name(dt));
  return f(std::false_type{});
}

dim3 tile_grid(int64_t batch, int64_t seq, int64_t heads) {
  const int64_t tiles = (seq + kTile - 1) / kTile;
  STOKER_CHECK(batch * heads <= 0x7fffffff && tiles <= 65535,
               "internal: flash attention grid out of range (validated by the caller)");
  return dim3(static_cast<unsigned>(batch * heads), static_cast<unsigned>(tiles));
}

const uint16_t* cptr(const Tensor& t) { return static_cast<const uint16_t*>(t.data()); }
uint16_t* mptr(const Tensor& t) { return static_cast<uint16_t*>(t.data()); }

}  // namespace

void flash_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int64_t batch,
                             int64_t seq, int64_t heads, float scale) {
  const core::DeviceScope scope(qkv.device().index);
  const cudaStream_t stream = core::cuda_stream(qkv.device());
  visit_half(qkv.dtype(), [&](auto bf) {
    flash_forward_kernel<decltype(bf)::value>
        <<<tile_grid(batch, seq, heads), kThreads, 0, stream>>>(
            mptr(out), static_cast<float*>(lse.data()), cptr(qkv), static_cast<int>(seq),
            static_cast<int>(heads), scale * kLog2e);
    STOKER_CUDA_CHECK(cudaGetLastError());
  });
}

void flash_attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const Tensor& delta,
                              int64_t batch, int64_t seq, int64_t heads, float scale) {
  const core::DeviceScope scope(qkv.device().index);
  const cudaStream_t stream = core::cuda_stream(qkv.device());
  const dim3 grid = tile_grid(batch, seq, heads);
  const int s = static_cast<int>(seq), h = static_cast<int>(heads);
  visit_half(qkv.dtype(), [&](auto bf) {
    constexpr bool kBf16 = decltype(bf)::value;
    const int64_t rows = batch * seq * heads;
    flash_delta_kernel<kBf16><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
        static_cast<float*>(delta.data()), cptr(dout), cptr(out), rows, s, h);
    STOKER_CUDA_CHECK(cudaGetLastError());
    const float* l = static_cast<const float*>(lse.data());
    const float* d = static_cast<const float*>(delta.data());
    allow_smem<flash_dkdv_kernel<kBf16>>(kDkdvSmem, qkv.device().index);
    flash_dkdv_kernel<kBf16><<<grid, kThreads, kDkdvSmem, stream>>>(
        mptr(dqkv), cptr(dout), cptr(qkv), l, d, s, h, scale, scale * kLog2e);
    STOKER_CUDA_CHECK(cudaGetLastError());
    allow_smem<flash_dq_kernel<kBf16>>(kDqSmem, qkv.device().index);
    flash_dq_kernel<kBf16><<<grid, kThreads, kDqSmem, stream>>>(mptr(dqkv), cptr(dout), cptr(qkv),
                                                                l, d, s, h, scale, scale * kLog2e);
    STOKER_CUDA_CHECK(cudaGetLastError());
  });
}

STOKER_REGISTER_STUB(flash_attention_forward, flash_attention_forward);
STOKER_REGISTER_STUB(flash_attention_backward, flash_attention_backward);

}  // namespace stoker::ops::cuda
