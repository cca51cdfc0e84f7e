// Private: CUDA entry points of ops/flash_attention.h (kernels/flash_attention.cu). Shapes and
// dtypes are validated by src/ops/flash_attention.cpp before these run; head_dim is 64.
//   forward   out [B, T, C], lse [B, H, T] f32  from qkv [B, T, 3C]
//   backward  dqkv [B, T, 3C] from dout, qkv, out, lse (delta [B, H, T] f32 is scratch)
#pragma once

#include <cstdint>

#include "stoker/core/tensor.h"

namespace stoker::ops::cuda {

void flash_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv, int64_t batch,
                             int64_t seq, int64_t heads, float scale);
void flash_attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const Tensor& delta,
                              int64_t batch, int64_t seq, int64_t heads, float scale);

}  // namespace stoker::ops::cuda
