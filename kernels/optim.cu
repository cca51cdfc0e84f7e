// Multi-tensor SGD and AdamW: every parameter of a model updated in one launch (or a few, for
// very long lists) through multi_tensor.cuh, over f32 state, and over compact state (bf16,
// block-wise 8-bit) with launches of their own below. The per-element math is ops/optim_math.h,
// shared with the CPU; this file is compiled with -fmad=false so that only the explicit fmaf
// calls fuse, on both sides: bit-identical updates.
//
// found_inf (optional, a device flag written by the gradient scaler) is read by every thread
// before it writes anything: an overflowed step leaves parameters and state untouched without
// a host sync. (Clipping, loss scaling and the loss monitor: training.cu; cast_multi:
// copy.cu.)
#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernel_util.cuh"
#include "multi_tensor.cuh"
#include "ops/optim_stubs.h"
#include "ops/quantize_math.h"
#include "stoker/ops/fp8.h"

namespace stoker::ops::cuda {

namespace {

// The compact kernels' block: the multi-tensor one's size.
constexpr int kOptimBlock = kMultiTensorBlock;

struct SgdOp {
  detail::SgdConsts c;
  const float* lr;  // device learning rate, or null
  __device__ void operator()(const MultiTensorArgs& a, int t, int64_t i) const {
    float p = a.p[t][i];
    float buf = c.has_momentum ? a.s1[t][i] : 0.0f;
    detail::SgdConsts k = c;
    if (lr) k.lr = *lr;
    detail::sgd_update(p, buf, a.g[t][i], k);
    a.p[t][i] = p;
    if (c.has_momentum) a.s1[t][i] = buf;
  }
};

// H: the dtype of the compute copies written with the new value (a.h), or void for none.
template <typename H>
struct AdamWOp {
  detail::AdamWConsts c;
  const AdamWStepState* state;  // device step state (bias corrections), or null
  const float* lr;              // device learning rate (decay from it), or null
  double weight_decay;
  // The step's constants, with what the device holds (bias corrections, learning rate).
  __device__ detail::AdamWConsts consts() const {
    detail::AdamWConsts k = c;
    if (state) {
      k.step_size = state->step_size;
      k.bc2_sqrt = state->bc2_sqrt;
    }
    if (lr) k.decay = detail::adamw_decay(static_cast<double>(*lr), weight_decay);
    return k;
  }
  __device__ void operator()(const MultiTensorArgs& a, int t, int64_t i) const {
    float p = a.p[t][i], m = a.s1[t][i], v = a.s2[t][i];
    detail::adamw_update(p, m, v, a.g[t][i], consts());
    a.p[t][i] = p;
    a.s1[t][i] = m;
    a.s2[t][i] = v;
    if constexpr (!std::is_void_v<H>) {
      if (a.h[t] != nullptr) static_cast<H*>(a.h[t])[i] = from_float<H>(p);
    }
  }
  // Quads (multi_tensor.cuh): p, g and both moments as 16-byte words, the compute copy as one
  // 8-byte word; the same per-element update.
  __device__ bool quad_ok(const MultiTensorArgs& a, int t) const {
    const auto al = [](const void* q, unsigned n) {
      return reinterpret_cast<uintptr_t>(q) % n == 0;
    };
    bool ok = al(a.p[t], 16) && al(a.g[t], 16) && al(a.s1[t], 16) && al(a.s2[t], 16);
    if constexpr (!std::is_void_v<H>) ok = ok && al(a.h[t], 4 * sizeof(H));
    return ok;
  }
  __device__ void quad(const MultiTensorArgs& a, int t, int64_t i) const {
    const Pack<float, 4> g = load_pack<4>(a.g[t] + i);
    Pack<float, 4> p = load_pack<4>(a.p[t] + i), m = load_pack<4>(a.s1[t] + i),
                   v = load_pack<4>(a.s2[t] + i);
    const detail::AdamWConsts k = consts();
#pragma unroll
    for (int e = 0; e < 4; ++e) detail::adamw_update(p.v[e], m.v[e], v.v[e], g.v[e], k);
    store_pack<4>(a.p[t] + i, p);
    store_pack<4>(a.s1[t] + i, m);
    store_pack<4>(a.s2[t] + i, v);
    if constexpr (!std::is_void_v<H>) {
      if (a.h[t] != nullptr) store_floats<4>(static_cast<H*>(a.h[t]) + i, p.v);
    }
  }
};

// ---- updates over compact state (bf16, block-wise 8-bit; ops/optim.h) ----
//
// One launch over the list, like launch_multi_tensor (multi_tensor.cuh), but a tensor's chunk
// depends on how its state is stored: kChunk elements for f32 and bf16 state (grid-stride
// within the chunk), one tile of quantization blocks for 8-bit state. The tensor (and so the
// branch) is uniform in a block, which makes the __syncthreads of the reduction legal.
//
// 8-bit tiles: a tile is one quantization block, or 1024 / block of them when the block
// divides 1024 (so that a block of 256 keeps every thread busy). Each thread owns quads, 4
// consecutive values: with 256 threads a tile of T values is ceil(T / 1024) passes
// (kPasses, a template parameter: 2 for the default block of 2048). A thread first issues all
// its loads (p and g as float4, each state's 4 codes as one u32, when the tensor's pointers
// allow it; scalar loads otherwise and at the tensor's end), so that many bytes are in flight;
// then decodes (map in shared memory), updates and stores p, keeping the new states in
// registers; the CUDA block reduces each quantization block's new absmax (a warp's 32 quads,
// 128 values, never straddle two quantization blocks: block is a multiple of 256); then each
// thread encodes its values (quantize_math.h's table, in shared memory) and stores 4 codes as one
// u32. Per value this moves p (read, written), g, and a code per state (read, written): 16
// bytes for AdamW against 28 with f32 state. bf16 chunks of aligned tensors also run as quads
// (bf16_quads); f32 chunks (small parameters) stay scalar.
constexpr int kMaxCompactTensors = 256;
constexpr int kQuad = 4;
constexpr int kMaxQ8Passes = 4096 / (kOptimBlock * kQuad);

struct CompactArgs {
  const float* found_inf;
  alignas(16) float maps[2][256];   // the 8-bit map of each state (decoding)
  detail::EncodeTable encoders[2];  // its encode table (quantize_math.h)
  int64_t block;                    // values per absmax (8-bit state)
  int64_t tile;                     // values per 8-bit chunk: a multiple of block
  int32_t has_q8;                   // any 8-bit tensor in this launch (else: no tables needed)
  int32_t stochastic;
  uint64_t seed, offset;
  int32_t count;
  int64_t chunk_begin[kMaxCompactTensors + 1];
  int64_t numel[kMaxCompactTensors];
  int64_t base[kMaxCompactTensors];  // list-wide index of the first element (rounding draws)
  float* p[kMaxCompactTensors];
  const float* g[kMaxCompactTensors];
  void* s[2][kMaxCompactTensors];
  float* absmax[2][kMaxCompactTensors];
  uint8_t form[kMaxCompactTensors];
  uint8_t vec[kMaxCompactTensors];  // p, g and the states aligned for quads (see launch)
};
static_assert(sizeof(CompactArgs) <= 32764, "compact optimizer kernel parameters too large");

// Copies `bytes` (a multiple of 16) from the kernel parameters to shared memory, 16 bytes per
// thread and step (parameter space serves distinct addresses one at a time: wide words, fewer
// of them).
__device__ STOKER_FORCEINLINE void copy_to_shared(void* dst, const void* src, int bytes) {
  const auto* s = static_cast<const uint4*>(src);
  auto* d = static_cast<uint4*>(dst);
  for (int i = threadIdx.x; i < bytes / 16; i += blockDim.x) d[i] = s[i];
}

// One 8-bit tile (see above) of tensor t starting at value `tile_begin`.
template <int K, int kPasses, typename Op>
__device__ STOKER_FORCEINLINE void q8_tile(const CompactArgs& a, const Op& op, int t,
                                           int64_t tile_begin, const float (*maps)[256],
                                           const detail::EncodeTable* encoders,
                                           float (*scratch)[kOptimBlock / 32]) {
  const int64_t numel = a.numel[t];
  const int64_t block = a.block;
  const int tile = static_cast<int>(min(a.tile, numel - tile_begin));  // values in this tile
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float* p = a.p[t];
  const float* g = a.g[t];
  uint8_t* codes[K];
#pragma unroll
  for (int k = 0; k < K; ++k) codes[k] = static_cast<uint8_t*>(a.s[k][t]);
  const bool vec = a.vec[t] != 0;
  // This thread's quantization block (one per thread: several passes only when tile == block).
  const bool active = tid * kQuad < tile;
  const int64_t qb = (tile_begin + (kPasses == 1 ? tid * kQuad : 0)) / block;
  float scale[K];
#pragma unroll
  for (int k = 0; k < K; ++k) scale[k] = active ? a.absmax[k][t][qb] : 0.0f;

  // Loads first, all passes.
  float pv[kPasses][kQuad], gv[kPasses][kQuad];
  uint32_t cw[K][kPasses];
#pragma unroll
  for (int j = 0; j < kPasses; ++j) {
    const int o = (tid + j * kOptimBlock) * kQuad;  // offset in the tile
    const int64_t i = tile_begin + o;
#pragma unroll
    for (int e = 0; e < kQuad; ++e) pv[j][e] = gv[j][e] = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) cw[k][j] = 0;
    if (vec && o + kQuad <= tile) {
      const float4 pq = *reinterpret_cast<const float4*>(p + i);
      const float4 gq = __ldg(reinterpret_cast<const float4*>(g + i));
      pv[j][0] = pq.x, pv[j][1] = pq.y, pv[j][2] = pq.z, pv[j][3] = pq.w;
      gv[j][0] = gq.x, gv[j][1] = gq.y, gv[j][2] = gq.z, gv[j][3] = gq.w;
#pragma unroll
      for (int k = 0; k < K; ++k) cw[k][j] = *reinterpret_cast<const uint32_t*>(codes[k] + i);
    } else {
#pragma unroll
      for (int e = 0; e < kQuad; ++e)
        if (o + e < tile) {
          pv[j][e] = p[i + e];
          gv[j][e] = g[i + e];
#pragma unroll
          for (int k = 0; k < K; ++k) cw[k][j] |= static_cast<uint32_t>(codes[k][i + e]) << (8 * e);
        }
    }
  }

  // Decode, update, store p; keep the new states.
  float vals[K][kPasses][kQuad], local[K];
#pragma unroll
  for (int k = 0; k < K; ++k) local[k] = 0.0f;
#pragma unroll
  for (int j = 0; j < kPasses; ++j) {
    const int o = (tid + j * kOptimBlock) * kQuad;
    const int64_t i = tile_begin + o;
#pragma unroll
    for (int e = 0; e < kQuad; ++e) {
      float v[K];
#pragma unroll
      for (int k = 0; k < K; ++k) v[k] = maps[k][(cw[k][j] >> (8 * e)) & 0xffu] * scale[k];
      op(pv[j][e], gv[j][e], v);
      const bool in = o + e < tile;
#pragma unroll
      for (int k = 0; k < K; ++k) {
        vals[k][j][e] = v[k];
        if (in) local[k] = fmaxf(local[k], fabsf(v[k]));
      }
    }
    if (vec && o + kQuad <= tile) {
      *reinterpret_cast<float4*>(p + i) = make_float4(pv[j][0], pv[j][1], pv[j][2], pv[j][3]);
    } else {
#pragma unroll
      for (int e = 0; e < kQuad; ++e)
        if (o + e < tile) p[i + e] = pv[j][e];
    }
  }

  // The new absmax of each state over each quantization block (exact: max is order-free).
  // Warps w0 .. w0 + wpb - 1 hold this thread's quantization block.
  const int64_t block_warps = block / (32 * kQuad);
  const int wpb = block_warps < kOptimBlock / 32 ? static_cast<int>(block_warps) : kOptimBlock / 32;
  const int w0 = warp / wpb * wpb;
  float next[K];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float m = local[k];
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(~0u, m, o));
    if (lane == 0) scratch[k][warp] = m;
  }
  __syncthreads();  // every thread has read the old absmax before it is overwritten
#pragma unroll
  for (int k = 0; k < K; ++k) {
    next[k] = 0.0f;
    for (int w = w0; w < w0 + wpb && w < kOptimBlock / 32; ++w)
      next[k] = fmaxf(next[k], scratch[k][w]);
    if (active && lane == 0 && warp == w0) a.absmax[k][t][qb] = next[k];
  }
  __syncthreads();  // scratch is reused by the next tile

  // Encode and store 4 codes per state as one word.
#pragma unroll
  for (int j = 0; j < kPasses; ++j) {
    const int o = (tid + j * kOptimBlock) * kQuad;
    const int64_t i = tile_begin + o;
    if (o >= tile) continue;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      uint32_t w = 0;
#pragma unroll
      for (int e = 0; e < kQuad; ++e)
        w |= static_cast<uint32_t>(
                 detail::encode_nearest(encoders[k], detail::normalize_by(vals[k][j][e], next[k])))
             << (8 * e);
      if (vec && o + kQuad <= tile) {
        *reinterpret_cast<uint32_t*>(codes[k] + i) = w;
      } else {
#pragma unroll
        for (int e = 0; e < kQuad; ++e)
          if (o + e < tile) codes[k][i + e] = static_cast<uint8_t>(w >> (8 * e));
      }
    }
  }
}

// bf16 state of a tensor whose pointers allow it: values [begin, end) (end - begin a multiple of
// 4) as quads per thread and step, p and g as float4 and each state's 4 bf16 as one 8-byte
// word: the scalar loop's per-element math and rounding draws, fewer and wider accesses. With
// stochastic rounding, a quad whose list-wide index gi is a multiple of 4 takes its 4 draws
// from one Philox block (lanes 0..3 of block offset + gi / 4, as state_rounding_bits would).
template <int K, typename Op>
__device__ STOKER_FORCEINLINE void bf16_quads(const CompactArgs& a, const Op& op, int t,
                                              int64_t begin, int64_t end) {
  float* p = a.p[t];
  const float* g = a.g[t];
  for (int64_t i = begin + static_cast<int64_t>(threadIdx.x) * kQuad; i < end;
       i += static_cast<int64_t>(blockDim.x) * kQuad) {
    const float4 pq = *reinterpret_cast<const float4*>(p + i);
    const float4 gq = __ldg(reinterpret_cast<const float4*>(g + i));
    uint2 sw[K];
#pragma unroll
    for (int k = 0; k < K; ++k)
      sw[k] = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(a.s[k][t]) + i);
    float pv[kQuad] = {pq.x, pq.y, pq.z, pq.w};
    const float gv[kQuad] = {gq.x, gq.y, gq.z, gq.w};
    uint32_t r[kQuad] = {0u, 0u, 0u, 0u};
    if (a.stochastic) {
      const uint64_t gi = static_cast<uint64_t>(a.base[t] + i);
      if (gi % 4 == 0) {
        const core::Philox4 b =
            core::philox_block(a.seed, detail::kStateRoundingStream, a.offset + gi / 4);
#pragma unroll
        for (int e = 0; e < kQuad; ++e) r[e] = b.v[e];
      } else {
#pragma unroll
        for (int e = 0; e < kQuad; ++e)
          r[e] = detail::state_rounding_bits(a.seed, a.offset, gi + e);
      }
    }
    uint32_t out[K][2];
#pragma unroll
    for (int k = 0; k < K; ++k) out[k][0] = out[k][1] = 0u;
#pragma unroll
    for (int e = 0; e < kQuad; ++e) {
      float v[K];
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const uint32_t w = e < 2 ? sw[k].x : sw[k].y;
        v[k] = core::bf16_bits_to_float(static_cast<uint16_t>(w >> (16 * (e % 2))));
      }
      op(pv[e], gv[e], v);
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const uint16_t b = a.stochastic ? detail::float_to_bf16_stochastic(v[k], r[e] >> (16 * k))
                                        : core::float_to_bf16_bits(v[k]);
        out[k][e / 2] |= static_cast<uint32_t>(b) << (16 * (e % 2));
      }
    }
    *reinterpret_cast<float4*>(p + i) = make_float4(pv[0], pv[1], pv[2], pv[3]);
#pragma unroll
    for (int k = 0; k < K; ++k)
      *reinterpret_cast<uint2*>(static_cast<uint16_t*>(a.s[k][t]) + i) =
          make_uint2(out[k][0], out[k][1]);
  }
}

// Op: K (states) and operator()(float& p, float g, float* s).
template <int K, int kPasses, typename Op>
__global__ void __launch_bounds__(kOptimBlock)
    compact_kernel(const __grid_constant__ CompactArgs a, Op op) {
  if (a.found_inf && *a.found_inf != 0.0f) return;
  __shared__ alignas(16) float maps[K][256];
  __shared__ detail::EncodeTable encoders[K];
  __shared__ float scratch[K][kOptimBlock / 32];
  if (a.has_q8) {
    copy_to_shared(maps, a.maps, sizeof(maps));
    copy_to_shared(encoders, a.encoders, sizeof(encoders));
    __syncthreads();
  }
  const int64_t chunks = a.chunk_begin[a.count];
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int t = find_tensor(a, c);
    const int form = a.form[t];
    float* p = a.p[t];
    const float* g = a.g[t];
    if (form == detail::kStateQ8) {
      q8_tile<K, kPasses>(a, op, t, (c - a.chunk_begin[t]) * a.tile, maps, encoders, scratch);
    } else {
      const int64_t begin = (c - a.chunk_begin[t]) * kChunk;
      const int64_t end = min(begin + kChunk, a.numel[t]);
      int64_t scalar_begin = begin;  // the quads' tail, or everything
      if (form == detail::kStateBF16 && a.vec[t]) {
        scalar_begin = begin + (end - begin) / kQuad * kQuad;
        bf16_quads<K>(a, op, t, begin, scalar_begin);
      }
      for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) {
        float v[K];
        float pi = p[i];
        if (form == detail::kStateF32) {
#pragma unroll
          for (int k = 0; k < K; ++k) v[k] = static_cast<const float*>(a.s[k][t])[i];
          op(pi, g[i], v);
#pragma unroll
          for (int k = 0; k < K; ++k) static_cast<float*>(a.s[k][t])[i] = v[k];
        } else {
#pragma unroll
          for (int k = 0; k < K; ++k)
            v[k] = core::bf16_bits_to_float(static_cast<const uint16_t*>(a.s[k][t])[i]);
          op(pi, g[i], v);
          const uint32_t r = a.stochastic
                                 ? detail::state_rounding_bits(a.seed, a.offset,
                                                               static_cast<uint64_t>(a.base[t] + i))
                                 : 0u;
#pragma unroll
          for (int k = 0; k < K; ++k)
            static_cast<uint16_t*>(a.s[k][t])[i] =
                a.stochastic ? detail::float_to_bf16_stochastic(v[k], r >> (16 * k))
                             : core::float_to_bf16_bits(v[k]);
        }
        p[i] = pi;
      }
    }
  }
}

detail::StateForm form_of(const StateTensor& s) {
  switch (s.values.dtype()) {
    case DType::bf16:
      return detail::kStateBF16;
    case DType::u8:
      return detail::kStateQ8;
    default:
      return detail::kStateF32;
  }
}

template <int K, typename Op>
void launch_compact(std::span<const Tensor> params, std::span<const Tensor> grads,
                    std::array<std::span<const StateTensor>, K> states,
                    std::array<bool, K> is_signed, const StateStorage& st, const Tensor& found_inf,
                    Op op) {
  const Device device = params[0].device();
  core::DeviceScope scope(device.index);
  int64_t base = 0;
  for (size_t first = 0; first < params.size(); first += kMaxCompactTensors) {
    const size_t last = std::min(params.size(), first + kMaxCompactTensors);
    auto a = std::make_unique<CompactArgs>();
    a->found_inf = found_inf.defined() ? static_cast<const float*>(found_inf.data()) : nullptr;
    for (int k = 0; k < K; ++k) {
      const auto& m = dynamic_map(is_signed[k]);
      std::copy(m.begin(), m.end(), a->maps[k]);
      a->encoders[k] = detail::encode_table(is_signed[k]);
    }
    a->block = st.block;
    // A tile of 1024 / block quantization blocks when block divides 1024, else one.
    const int64_t per_tile = st.block <= 1024 && 1024 % st.block == 0 ? 1024 / st.block : 1;
    a->tile = st.block * per_tile;
    a->stochastic = st.stochastic_rounding ? 1 : 0;
    a->seed = st.seed;
    a->offset = st.offset;
    int n = 0;
    int64_t chunks = 0;
    for (size_t t = first; t < last; ++t) {
      const int64_t numel = params[t].numel();
      const int64_t at = base;
      base += numel;
      if (numel == 0) continue;
      const detail::StateForm form = form_of(states[0][t]);
      a->chunk_begin[n] = chunks;
      a->numel[n] = numel;
      a->base[n] = at;
      a->p[n] = static_cast<float*>(params[t].data());
      a->g[n] = static_cast<const float*>(grads[t].data());
      a->form[n] = form;
      const auto aligned = [](const void* ptr, uintptr_t bytes) {
        return reinterpret_cast<uintptr_t>(ptr) % bytes == 0;
      };
      // Quads: p and g as float4; 4 codes (u32) or 4 bf16 (8 bytes) per state.
      bool vec = aligned(a->p[n], 16) && aligned(a->g[n], 16);
      for (int k = 0; k < K; ++k)
        vec = vec && aligned(states[k][t].values.data(), form == detail::kStateBF16 ? 8 : 4);
      a->vec[n] = vec ? 1 : 0;
      if (form == detail::kStateQ8) a->has_q8 = 1;
      for (int k = 0; k < K; ++k) {
        a->s[k][n] = states[k][t].values.data();
        a->absmax[k][n] =
            form == detail::kStateQ8 ? static_cast<float*>(states[k][t].absmax.data()) : nullptr;
      }
      const int64_t per_chunk = form == detail::kStateQ8 ? a->tile : kChunk;
      chunks += (numel + per_chunk - 1) / per_chunk;
      ++n;
    }
    if (n == 0) continue;
    a->count = n;
    a->chunk_begin[n] = chunks;
    const unsigned grid = static_cast<unsigned>(
        std::min<int64_t>(chunks, static_cast<int64_t>(sm_count(device.index)) * 8));
    const cudaStream_t stream = core::cuda_stream(device);
    // Without 8-bit tensors the passes do not matter: the 1-pass kernel uses fewest registers.
    const int64_t passes =
        a->has_q8 ? (a->tile + kOptimBlock * kQuad - 1) / (kOptimBlock * kQuad) : 1;
    switch (passes) {
      case 1:
        compact_kernel<K, 1><<<grid, kOptimBlock, 0, stream>>>(*a, op);
        break;
      case 2:
        compact_kernel<K, 2><<<grid, kOptimBlock, 0, stream>>>(*a, op);
        break;
      case 3:
        compact_kernel<K, 3><<<grid, kOptimBlock, 0, stream>>>(*a, op);
        break;
      default:
        static_assert(kMaxQ8Passes == 4, "one kernel per number of passes");
        compact_kernel<K, 4><<<grid, kOptimBlock, 0, stream>>>(*a, op);
    }
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
}

struct SgdCompactOp {
  detail::SgdConsts c;
  __device__ void operator()(float& p, float g, float* s) const {
    detail::sgd_update(p, s[0], g, c);
  }
};

struct AdamWCompactOp {
  detail::AdamWConsts c;
  const AdamWStepState* state;
  __device__ void operator()(float& p, float g, float* s) const {
    detail::AdamWConsts k = c;
    if (state) {
      k.step_size = state->step_size;
      k.bc2_sqrt = state->bc2_sqrt;
    }
    detail::adamw_update(p, s[0], s[1], g, k);
  }
};

__global__ void adamw_advance_kernel(AdamWStepState* s, const float* found_inf, double beta1,
                                     double beta2, double lr, const float* lr_device = nullptr) {
  if (lr_device) lr = static_cast<double>(*lr_device);
  detail::adamw_advance(*s, found_inf && *found_inf != 0.0f, beta1, beta2, lr);
}

}  // namespace

void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads,
              std::span<const Tensor> bufs, const detail::SgdConsts& c, const Tensor& found_inf,
              const Tensor& lr_device) {
  const float* lr = lr_device.defined() ? static_cast<const float*>(lr_device.data()) : nullptr;
  launch_multi_tensor(params, grads, c.has_momentum ? bufs : std::span<const Tensor>{}, {},
                      found_inf, SgdOp{c, lr});
}

void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads,
                std::span<const Tensor> exp_avgs, std::span<const Tensor> exp_avg_sqs,
                const detail::AdamWConsts& c, const Tensor& found_inf, const Tensor& step_state,
                double beta1, double beta2, double lr, std::span<const Tensor> compute_copies,
                const Tensor& lr_device, double weight_decay) {
  AdamWStepState* st = nullptr;
  const float* lr_dev = lr_device.defined() ? static_cast<const float*>(lr_device.data()) : nullptr;
  if (step_state.defined()) {
    // One thread advances the step count and the bias corrections (unless skipped); the update
    // kernel then reads them: the host never learns whether the step was taken.
    const core::DeviceScope scope(step_state.device().index);
    st = static_cast<AdamWStepState*>(step_state.data());
    adamw_advance_kernel<<<1, 1, 0, core::cuda_stream(step_state.device())>>>(
        st, found_inf.defined() ? static_cast<const float*>(found_inf.data()) : nullptr, beta1,
        beta2, lr, lr_dev);
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
  DType half = DType::f32;  // f32: no copies to write
  for (const Tensor& h : compute_copies)
    if (h.defined()) half = h.dtype();
  if (half == DType::f16)
    launch_multi_tensor(params, grads, exp_avgs, exp_avg_sqs, found_inf,
                        AdamWOp<core::Half>{c, st, lr_dev, weight_decay}, {}, {}, compute_copies);
  else if (half == DType::bf16)
    launch_multi_tensor(params, grads, exp_avgs, exp_avg_sqs, found_inf,
                        AdamWOp<core::BFloat16>{c, st, lr_dev, weight_decay}, {}, {},
                        compute_copies);
  else
    launch_multi_tensor(params, grads, exp_avgs, exp_avg_sqs, found_inf,
                        AdamWOp<void>{c, st, lr_dev, weight_decay});
}

void sgd_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,
                      std::span<const StateTensor> bufs, const detail::SgdConsts& c,
                      const StateStorage& storage, const Tensor& found_inf) {
  launch_compact<1>(params, grads, {bufs}, {true}, storage, found_inf, SgdCompactOp{c});
}

void adamw_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,
                        std::span<const StateTensor> exp_avgs,
                        std::span<const StateTensor> exp_avg_sqs, const detail::AdamWConsts& c,
                        const StateStorage& storage, const Tensor& found_inf,
                        const Tensor& step_state, double beta1, double beta2, double lr) {
  AdamWStepState* st = nullptr;
  if (step_state.defined()) {
    const core::DeviceScope scope(step_state.device().index);
    st = static_cast<AdamWStepState*>(step_state.data());
    adamw_advance_kernel<<<1, 1, 0, core::cuda_stream(step_state.device())>>>(
        st, found_inf.defined() ? static_cast<const float*>(found_inf.data()) : nullptr, beta1,
        beta2, lr);
    STOKER_CUDA_CHECK(cudaGetLastError());
  }
  launch_compact<2>(params, grads, {exp_avgs, exp_avg_sqs}, {true, false}, storage, found_inf,
                    AdamWCompactOp{c, st});
}

STOKER_REGISTER_STUB(sgd_step, sgd_step);
STOKER_REGISTER_STUB(adamw_step, adamw_step);
STOKER_REGISTER_STUB(sgd_step_compact, sgd_step_compact);
STOKER_REGISTER_STUB(adamw_step_compact, adamw_step_compact);

}  // namespace stoker::ops::cuda
