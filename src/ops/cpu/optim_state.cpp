// CPU reference of the optimizer updates over compact state (ops/optim.h, "compact"): the same
// per-element math as the f32 updates (ops/optim_math.h), with loads and stores that decode and
// encode bf16 or block-wise 8-bit state (ops/quantize_math.h). 8-bit tensors run one task per run
// of quantization blocks: a block is decoded and updated into a local f32 buffer, its new absmax
// taken, then encoded. kernels/optim.cu does exactly this per CUDA block, so codes agree.
//
// bf16 state rounded to nearest and 8-bit blocks run loops compiled for AVX2 + FMA where the CPU
// has them (ops/cpu/optim_simd.h: same bits as the baseline clone; this file is built with
// -fno-math-errno so sqrtf vectorizes). Stochastic rounding keeps plain loops.
#include <algorithm>
#include <array>
#include <cmath>

#include "ops/cpu/optim_simd.h"
#include "ops/cpu/optim_step.h"
#include "ops/cpu/parallel.h"
#include "ops/optim_stubs.h"
#include "ops/quantize_math.h"
#include "stoker/ops/fp8.h"

namespace stoker::ops::cpu {

namespace {

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

// bf16 state rounded to nearest: the chunk loops (restrict pointers, constants by value).
template <bool kFirst, bool kNesterov>
STOKER_FORCEINLINE void sgd_bf16_loop(float* __restrict p, const float* __restrict g,
                                      uint16_t* __restrict b, int64_t n, detail::SgdConsts c) {
  c.first_step = kFirst;  // compile-time flags: one branch-free loop body per case
  c.nesterov = kNesterov;
  c.has_momentum = true;
  for (int64_t i = 0; i < n; ++i) {
    float v = core::bf16_bits_to_float(b[i]);
    detail::sgd_update(p[i], v, g[i], c);
    b[i] = core::float_to_bf16_bits(v);
  }
}

STOKER_OPTIM_CLONES void sgd_bf16_chunk(float* __restrict p, const float* __restrict g,
                                        uint16_t* __restrict b, int64_t n,
                                        const detail::SgdConsts c) {
  if (c.first_step)
    c.nesterov ? sgd_bf16_loop<true, true>(p, g, b, n, c)
               : sgd_bf16_loop<true, false>(p, g, b, n, c);
  else
    c.nesterov ? sgd_bf16_loop<false, true>(p, g, b, n, c)
               : sgd_bf16_loop<false, false>(p, g, b, n, c);
}

STOKER_OPTIM_CLONES void adamw_bf16_chunk(float* __restrict p, const float* __restrict g,
                                          uint16_t* __restrict m, uint16_t* __restrict v, int64_t n,
                                          const detail::AdamWConsts c) {
  for (int64_t i = 0; i < n; ++i) {
    float mf = core::bf16_bits_to_float(m[i]), vf = core::bf16_bits_to_float(v[i]);
    detail::adamw_update(p[i], mf, vf, g[i], c);
    m[i] = core::float_to_bf16_bits(mf);
    v[i] = core::float_to_bf16_bits(vf);
  }
}

// One quantization block of 8-bit state (n <= 4096 values): decode, update (p in place), the
// new absmax, encode — the per-element work of kernels/optim.cu's 8-bit tiles, in the same
// order. Cloned like the bf16 chunks, so the update's fmaf is one instruction on AVX2 machines.
struct Q8Ref {
  uint8_t* codes;
  float* absmax;  // this block's scale (read, then overwritten)
  const float* map;
  const detail::EncodeTable* encoder;
};

STOKER_FORCEINLINE void q8_encode(const Q8Ref& s, const float* vals, int64_t n, float next) {
  *s.absmax = next;
  for (int64_t i = 0; i < n; ++i)
    s.codes[i] = detail::encode_nearest(*s.encoder, detail::normalize_by(vals[i], next));
}

STOKER_OPTIM_CLONES void sgd_q8_block(float* __restrict p, const float* __restrict g, Q8Ref b,
                                      int64_t n, const detail::SgdConsts c, float* __restrict vb) {
  const float scale = *b.absmax;
  float next = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float v = b.map[b.codes[i]] * scale;
    detail::sgd_update(p[i], v, g[i], c);
    vb[i] = v;
    next = std::fmax(next, std::fabs(v));
  }
  q8_encode(b, vb, n, next);
}

STOKER_OPTIM_CLONES void adamw_q8_block(float* __restrict p, const float* __restrict g, Q8Ref m,
                                        Q8Ref v, int64_t n, const detail::AdamWConsts c,
                                        float* __restrict mb, float* __restrict vb) {
  const float sm = *m.absmax, sv = *v.absmax;
  float nm = 0.0f, nv = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float mf = m.map[m.codes[i]] * sm, vf = v.map[v.codes[i]] * sv;
    detail::adamw_update(p[i], mf, vf, g[i], c);
    mb[i] = mf;
    vb[i] = vf;
    nm = std::fmax(nm, std::fabs(mf));
    nv = std::fmax(nv, std::fabs(vf));
  }
  q8_encode(m, mb, n, nm);
  q8_encode(v, vb, n, nv);
}

// K state lists (1: SGD momentum, 2: AdamW moments); is_signed[k] picks state k's 8-bit map.
// update(p, g, s) updates p and s[0..K) in f32; bf16_chunk(p, g, s, n) does the same over n
// elements of bf16 state rounded to nearest (s: K pointers to the first element's states);
// q8_block(p, g, refs, n, scratch) over one quantization block of 8-bit state.
template <int K, typename Update, typename Bf16Chunk, typename Q8Block>
void run_compact(std::span<const Tensor> params, std::span<const Tensor> grads,
                 std::array<std::span<const StateTensor>, K> states, std::array<bool, K> is_signed,
                 const StateStorage& st, Update update, Bf16Chunk bf16_chunk, Q8Block q8_block) {
  std::array<const float*, K> maps;
  std::array<const detail::EncodeTable*, K> encoders;
  for (int k = 0; k < K; ++k) {
    maps[k] = dynamic_map(is_signed[k]).data();
    encoders[k] = &detail::encode_table(is_signed[k]);
  }
  uint64_t base = 0;  // list-wide index of tensor t's first element (rounding draws)
  for (size_t t = 0; t < params.size(); ++t) {
    const int64_t n = params[t].numel();
    float* p = static_cast<float*>(params[t].data());
    const float* g = static_cast<const float*>(grads[t].data());
    const detail::StateForm form = form_of(states[0][t]);
    if (form == detail::kStateF32) {
      std::array<float*, K> s;
      for (int k = 0; k < K; ++k) s[k] = static_cast<float*>(states[k][t].values.data());
      parallel_range(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          float v[K];
          for (int k = 0; k < K; ++k) v[k] = s[k][i];
          update(p[i], g[i], v);
          for (int k = 0; k < K; ++k) s[k][i] = v[k];
        }
      });
    } else if (form == detail::kStateBF16) {
      std::array<uint16_t*, K> s;
      for (int k = 0; k < K; ++k) s[k] = static_cast<uint16_t*>(states[k][t].values.data());
      if (!st.stochastic_rounding) {
        parallel_range(n, [&](int64_t b, int64_t e) {
          std::array<uint16_t*, K> sb;
          for (int k = 0; k < K; ++k) sb[k] = s[k] + b;
          bf16_chunk(p + b, g + b, sb, e - b);
        });
        base += static_cast<uint64_t>(n);
        continue;
      }
      parallel_range(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          float v[K];
          for (int k = 0; k < K; ++k) v[k] = core::bf16_bits_to_float(s[k][i]);
          update(p[i], g[i], v);
          if (st.stochastic_rounding) {
            const uint32_t r = detail::state_rounding_bits(st.seed, st.offset, base + i);
            for (int k = 0; k < K; ++k)
              s[k][i] = detail::float_to_bf16_stochastic(v[k], r >> (16 * k));
          } else {
            for (int k = 0; k < K; ++k) s[k][i] = core::float_to_bf16_bits(v[k]);
          }
        }
      });
    } else {
      const int64_t block = st.block;
      std::array<uint8_t*, K> codes;
      std::array<float*, K> absmax;
      for (int k = 0; k < K; ++k) {
        codes[k] = static_cast<uint8_t*>(states[k][t].values.data());
        absmax[k] = static_cast<float*>(states[k][t].absmax.data());
      }
      parallel_range(
          quantization_blocks(n, block),
          [&](int64_t b0, int64_t b1) {
            std::array<std::array<float, 4096>, K> vals;
            for (int64_t qb = b0; qb < b1; ++qb) {
              const int64_t s = qb * block, e = std::min(n, s + block);
              std::array<Q8Ref, K> refs;
              for (int k = 0; k < K; ++k)
                refs[k] = {codes[k] + s, absmax[k] + qb, maps[k], encoders[k]};
              q8_block(p + s, g + s, refs, e - s, vals);
            }
          },
          std::max<int64_t>(1, kGrain / block));
    }
    base += static_cast<uint64_t>(n);
  }
}

}  // namespace

void sgd_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,
                      std::span<const StateTensor> bufs, const detail::SgdConsts& c,
                      const StateStorage& storage, const Tensor& found_inf) {
  if (skip_step(found_inf)) return;
  run_compact<1>(
      params, grads, {bufs}, {true}, storage,
      [&](float& p, float g, float* s) { detail::sgd_update(p, s[0], g, c); },
      [&](float* p, const float* g, std::array<uint16_t*, 1> s, int64_t n) {
        sgd_bf16_chunk(p, g, s[0], n, c);
      },
      [&](float* p, const float* g, const std::array<Q8Ref, 1>& r, int64_t n,
          std::array<std::array<float, 4096>, 1>& vals) {
        sgd_q8_block(p, g, r[0], n, c, vals[0].data());
      });
}

void adamw_step_compact(std::span<const Tensor> params, std::span<const Tensor> grads,
                        std::span<const StateTensor> exp_avgs,
                        std::span<const StateTensor> exp_avg_sqs,
                        const detail::AdamWConsts& host_consts, const StateStorage& storage,
                        const Tensor& found_inf, const Tensor& step_state, double beta1,
                        double beta2, double lr) {
  const bool skip = skip_step(found_inf);
  const detail::AdamWConsts c = adamw_step_consts(host_consts, step_state, skip, beta1, beta2, lr);
  if (skip) return;
  run_compact<2>(
      params, grads, {exp_avgs, exp_avg_sqs}, {true, false}, storage,
      [&](float& p, float g, float* s) { detail::adamw_update(p, s[0], s[1], g, c); },
      [&](float* p, const float* g, std::array<uint16_t*, 2> s, int64_t n) {
        adamw_bf16_chunk(p, g, s[0], s[1], n, c);
      },
      [&](float* p, const float* g, const std::array<Q8Ref, 2>& r, int64_t n,
          std::array<std::array<float, 4096>, 2>& vals) {
        adamw_q8_block(p, g, r[0], r[1], n, c, vals[0].data(), vals[1].data());
      });
}

STOKER_REGISTER_STUB(sgd_step_compact, sgd_step_compact);
STOKER_REGISTER_STUB(adamw_step_compact, adamw_step_compact);

}  // namespace stoker::ops::cpu
