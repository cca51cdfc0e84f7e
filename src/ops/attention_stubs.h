// Private: backend entry points of ops::gemm_batched and the attention pieces (dispatch.h has the
// convention; src/ops/attention.cpp composes them the same way on every device).
//   heads_from_tokens  src [B, T, G, H, D] → dst [G, B, H, T, D]   (G = 3: qkv; G = 1: dout)
//   tokens_from_heads  src [G, B, H, T, D] → dst [B, T, G, H, D]   (the inverse)
//   causal_softmax_forward   p = softmax over j <= i of s, row i of each [T, T] matrix; p[j > i]
//                            = 0; fp32 math; p may be s (in place)
//   causal_softmax_backward  ds = p * (dp - sum_j dp * p) * scale over j <= i, 0 above; fp32
//                            math; ds may be dp (in place)
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
                         int64_t groups, int64_t heads, int64_t head_dim));
STOKER_DECLARE_STUB(tokens_from_heads,
                    void(const Tensor& dst, const Tensor& src, int64_t batch, int64_t seq,
                         int64_t groups, int64_t heads, int64_t head_dim));
STOKER_DECLARE_STUB(causal_softmax_forward, void(const Tensor& p, const Tensor& s, int64_t seq));
STOKER_DECLARE_STUB(causal_softmax_backward, void(const Tensor& ds, const Tensor& dp,
                                                  const Tensor& p, int64_t seq, float scale));

}  // namespace stoker::ops
