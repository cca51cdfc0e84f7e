// Causal multi-head self-attention core (GPT-2's), forward and backward, from a packed qkv.
//
//   qkv [B, T, 3C]: per token the q, k and v rows side by side, each split into H heads of
//   D = C / H (PyTorch's `q, k, v = qkv.split(C, dim=-1)` then `.view(B, T, H, D)`).
//   out [B, T, C]:  per head softmax(q k^T / sqrt(D) + causal mask) v, heads concatenated.
//
// How (the unfused "math" algorithm; src/ops/attention.cpp has the why):
//   forward   heads = permute(qkv)                  [3, B, H, T, D]   (saved)
//             S = q k^T / sqrt(D)                   batched GEMM, in the compute dtype
//             P = causal_softmax(S)                 fp32 math, in place over S   (saved)
//             O = P v ; out = permute(O)
//   backward  dO = permute(dout); dV = P^T dO; dP = dO V^T;
//             dS = P * (dP - rowsum(dP * P)) / sqrt(D)   fp32 math, in place over dP
//             dQ = dS K; dK = dS^T Q; dqkv = permute(dQ, dK, dV)
// All tensors share one float dtype (f32, f16, bf16) and device; GEMMs accumulate in fp32,
// softmax statistics are fp32. Row j > i of P and dS (the future) is exactly 0.
// CUDA needs T <= kAttentionMaxSeqLenCuda (rows are kept in registers); the CPU has no limit.
//
// Memory: the forward keeps `heads` (3BTC) and `probs` (B H T^2) for the backward; the
// backward allocates dO (BTC), dP (B H T^2) and the permuted gradients (3BTC) as scratch.
// Work runs on the current stream of the tensors' device. Thread-safe as the ops are.
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::ops {

inline constexpr int64_t kAttentionMaxSeqLenCuda = 2048;

// out [B, T, C], heads [3, B, H, T, D], probs [B, H, T, T] are written; qkv [B, T, 3C] is read.
void attention_forward(const Tensor& out, const Tensor& heads, const Tensor& probs,
                       const Tensor& qkv, int64_t num_heads);
// dqkv [B, T, 3C] is overwritten; dout [B, T, C] and the forward's heads and probs are read.
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& heads,
                        const Tensor& probs);

}  // namespace stoker::ops
