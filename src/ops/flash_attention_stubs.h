// Private: backend entry points of ops/flash_attention.h (dispatch.h has the convention); CUDA
// only: kernels/flash_attention.cu. Shapes and dtypes are validated by src/ops/flash_attention.cpp
// before these run; head_dim is 64.
//   forward   out [B, T, C], lse [B, H, T] f32  from qkv [B, T, 3C]
//   backward  dqkv [B, T, 3C] from dout, qkv, out, lse (delta [B, H, T] f32 is scratch)
#pragma once

#include <cstdint>

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_CUDA_STUB(flash_attention_forward,
                         void(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                              int64_t batch, int64_t seq, int64_t heads, float scale));
STOKER_DECLARE_CUDA_STUB(flash_attention_backward,
                         void(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const Tensor& delta,
                              int64_t batch, int64_t seq, int64_t heads, float scale));

}  // namespace stoker::ops
