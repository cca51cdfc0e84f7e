// Fused causal grouped-query self-attention (FlashAttention-2 style), CUDA only: the same math as
// ops/attention.h (softmax(q k^T / sqrt(D) + mask) v per query head) from the packed
// qkv [B, T, (H + 2 KV) D] to out [B, T, H D] without materializing the T x T scores or
// probabilities. Per token, qkv holds the H query heads, then the KV key heads, then the KV value
// heads (q_proj | k_proj | v_proj side by side); query head h reads kv head h / (H / KV).
// KV = H is multi-head attention (GPT-2's qkv [B, T, 3C]).
//
//   forward   out [B, T, H D] and lse [B, H, T] f32, the per-row log-sum-exp (natural log) of the
//             scaled, masked scores: lse_i = ln sum_{j visible} exp(q_i . k_j / sqrt(D)).
//   backward  dqkv [B, T, (H + 2 KV) D] (overwritten) from dout [B, T, H D], the forward's qkv,
//             out and lse; P is recomputed from q, k and lse (FA2), so nothing of size T^2 is
//             kept or allocated. A kv head's dK and dV sum over its H / KV query heads inside
//             one CTA. Deterministic: no atomics, the same bits run to run.
//
// Mask: causal (query i sees keys j <= i). With `positions` [B, T] (i32 or i64: each token's
// position in its document, 0 at a document's first token, as data::SequenceBatches delivers
// them; padding tokens 0), query i sees key j iff i - positions[i] <= j <= i. Values are not
// checked on the host (that would synchronize): a negative position sees only its own token,
// one beyond i the whole prefix. Both passes must get the same positions.
//
// Supported (flash_attention_supported): qkv on a CUDA device, bf16 or f16, KV dividing H, head
// dim D = qkv.size(2) / (H + 2 KV) of 64 or 128, any T >= 1 (tiles of 64 rows, the tail masked),
// 16-byte aligned data. Math: mma.sync tensor cores with fp32 accumulation, fp32 online softmax;
// P and dS are rounded to the input dtype only as GEMM operands. Results differ from
// attention_forward/backward by rounding (that path rounds S, P, dP, dS to the dtype in memory),
// within the dtype's tolerance.
//
// There is no CPU implementation: callers pick ops::attention_forward/backward (the math path)
// when this is unsupported. Memory: the forward keeps out (which the caller keeps anyway as the
// output projection's input) and lse (4BHT bytes); the backward allocates delta [B, H, T] f32,
// and with positions each pass allocates 4B(T + T/64) bytes, as scratch from the device's caching
// allocator. Work runs on the current stream of qkv's device. Thread-safe as the ops are.
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::ops {

// True when the fused kernels handle this qkv [B, T, (H + 2 KV) D] with num_heads query and
// num_kv_heads key/value heads (head_dim = qkv.size(2) / (num_heads + 2 * num_kv_heads)).
bool flash_attention_supported(const Tensor& qkv, int64_t num_heads, int64_t num_kv_heads);

// out [B, T, H D] and lse [B, H, T] (f32) are written; qkv and positions (optional) are read.
void flash_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& qkv,
                             int64_t num_heads, int64_t num_kv_heads,
                             const Tensor& positions = Tensor());
// dqkv [B, T, (H + 2 KV) D] is overwritten; dout [B, T, H D] and the forward's qkv, out, lse and
// positions are read.
void flash_attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, int64_t num_heads,
                              int64_t num_kv_heads, const Tensor& positions = Tensor());

}  // namespace stoker::ops
