// Private: backend entry points of ops/flash_attention.h (dispatch.h has the convention); CUDA
// only: kernels/flash_attention.cu. Shapes and dtypes are validated by src/ops/flash_attention.cpp
// before these run; head_dim is 64 or 128, kv_heads divides heads.
//   forward   out [B, T, H D], lse [B, H, T] f32  from qkv [B, T, (H + 2 KV) D]
//   backward  dqkv [B, T, (H + 2 KV) D] from dout, qkv, out, lse (delta [B, H, T] f32 is scratch)
// positions [B, T] (i32 or i64) masks attention to documents; undefined: plain causal.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_CUDA_STUB(flash_attention_forward,
                         void(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                              const Tensor& positions, int64_t batch, int64_t seq, int64_t heads,
                              int64_t kv_heads, int64_t head_dim, float scale));
STOKER_DECLARE_CUDA_STUB(flash_attention_backward,
                         void(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const Tensor& positions,
                              const Tensor& delta, int64_t batch, int64_t seq, int64_t heads,
                              int64_t kv_heads, int64_t head_dim, float scale));

}  // namespace stoker::ops
