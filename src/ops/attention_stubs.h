// Private: backend entry points of ops::gemm_batched and the attention pieces (dispatch.h has the
// convention; src/ops/attention.cpp composes them the same way on every device). H query heads,
// KV key/value heads (KV divides H; KV = H: multi-head attention), head dim D; a token's row of
// the packed qkv holds its H query heads, then its KV key heads, then its KV value heads.
//   heads_from_tokens  G = 3: qkv [B, T, H + 2 KV, D] → dst [3, B, H, T, D], query head h using
//                      key/value head h / (H / KV) (the kv heads expanded to H);
//                      G = 1: src [B, T, H, D] → dst [1, B, H, T, D] (kv_heads = heads)
//   tokens_from_heads  the inverse: src [G, B, H, T, D] → dst [B, T, H + 2 KV, D] (G = 3) or
//                      [B, T, H, D] (G = 1); with KV < H each key/value head of dst is the fp32
//                      sum of its group's H / KV rows of src, rounded once (the gradient of the
//                      expansion); with KV = H a plain permutation
//   causal_softmax_forward   p = softmax over the visible keys of s, row i of each [T, T] matrix
//                            (rows ordered [B, H, T]), 0 elsewhere; fp32 math; p may be s
//   causal_softmax_backward  ds = p * (dp - sum_j dp * p) * scale over the visible keys, 0
//                            elsewhere; fp32 math; ds may be dp (in place)
// Visible keys of query i: j <= i (positions undefined), or with the document positions
// [B, T] (i32/i64) of the row's batch element, i - clamp(positions[i], 0, i) <= j <= i.
// CPU: src/ops/cpu/gemm_batched.cpp, attention.cpp; CUDA: src/ops/cuda/gemm_cublaslt.cpp,
// kernels/attention.cu.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(gemm_batched, void(const Tensor& c, const Tensor& a, const Tensor& b,
                                       int64_t batch, const GemmOptions& o));
STOKER_DECLARE_STUB(heads_from_tokens,
                    void(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq,
                         int64_t groups, int64_t heads, int64_t kv_heads, int64_t head_dim));
STOKER_DECLARE_STUB(tokens_from_heads,
                    void(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq,
                         int64_t groups, int64_t heads, int64_t kv_heads, int64_t head_dim));
STOKER_DECLARE_STUB(causal_softmax_forward, void(const Tensor& p, const Tensor& s, int64_t seq,
                                                 const Tensor& positions, int64_t heads));
STOKER_DECLARE_STUB(causal_softmax_backward,
                    void(const Tensor& ds, const Tensor& dp, const Tensor& p, int64_t seq,
                         float scale, const Tensor& positions, int64_t heads));

}  // namespace stoker::ops
