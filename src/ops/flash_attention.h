// Fused causal multi-head self-attention (FlashAttention-2 style), CUDA only: the same math as
// ops/attention.h (softmax(q k^T / sqrt(D) + causal mask) v per head, from the packed qkv
// [B, T, 3C] to out [B, T, C]) without materializing the T x T scores or probabilities.
//
//   forward   out [B, T, C] and lse [B, H, T] f32, the per-row log-sum-exp (natural log) of the
//             scaled, masked scores: lse_i = ln sum_{j <= i} exp(q_i . k_j / sqrt(D)).
//   backward  dqkv [B, T, 3C] (overwritten) from dout [B, T, C], the forward's qkv, out and lse;
//             P is recomputed from q, k and lse (FA2), so nothing of size T^2 is kept or
//             allocated. Deterministic: no atomics, the same bits run to run.
//
// Supported (flash_attention_supported): qkv on a CUDA device, bf16 or f16, head dim D = C / H
// = 64, any T >= 1 (tiles of 64 rows, the tail masked), 16-byte aligned data. Math: mma.sync
// tensor cores with fp32 accumulation, fp32 online softmax; P and dS are rounded to the input
// dtype only as GEMM operands. Results differ from attention_forward/backward by rounding
// (that path rounds S, P, dP, dS to the dtype in memory), within the dtype's tolerance.
//
// There is no CPU implementation: callers pick ops::attention_forward/backward (the math path,
// whose CPU version is the reference the GPU tests compare both with) when this is unsupported.
// Memory: the forward keeps out (which the caller keeps anyway as the proj Linear's input) and
// lse (4BHT bytes); the backward allocates delta [B, H, T] f32 as scratch from the device's
// caching allocator. Work runs on the current stream of qkv's device. Thread-safe as the ops are.
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::ops {

inline constexpr int64_t kFlashAttentionHeadDim = 64;

// True when the fused kernels handle this qkv [B, T, 3C] split into num_heads heads.
bool flash_attention_supported(const Tensor& qkv, int64_t num_heads);

// out [B, T, C] and lse [B, H, T] (f32) are written; qkv [B, T, 3C] is read.
void flash_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             int64_t num_heads);
// dqkv [B, T, 3C] is overwritten; dout [B, T, C] and the forward's qkv, out and lse are read.
void flash_attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int64_t num_heads);

}  // namespace stoker::ops
