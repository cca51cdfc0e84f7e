// Private: backend entry point of ops::rope_qkv_forward / rope_qkv_backward (ops/attention.h;
// dispatch.h has the convention). CPU: src/ops/cpu/rope.cpp; CUDA: kernels/rope.cu.
// qkv is [N, (H + 2 KV) * D] in place, positions i32 or i64 [N], inv_freq f32 [D / 2]; `sign`
// is +1 for the forward rotation and -1 for the backward's inverse one (sin negated).
#pragma once

#include <cstdint>

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(rope_qkv,
                    void(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                         int64_t num_heads, int64_t num_kv_heads, float sign));

}  // namespace stoker::ops
