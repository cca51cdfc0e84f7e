// Causal self-attention core, forward and backward, from a packed qkv [B, T, (H + 2 KV) D] —
// per token H query heads, then KV key heads, then KV value heads: GPT-2's multi-head attention
// (KV = H, PyTorch's split of [B, T, 3C] into q, k, v) or Llama's grouped-query attention
// (KV < H dividing H, Hugging Face's q_proj | k_proj | v_proj outputs side by side) — to out
// [B, T, H D], with an optional document mask for packed sequences; and rotary position
// embeddings applied to such a qkv (Llama's; at the end).
// One float dtype and device for all float tensors; GEMMs and softmax statistics in fp32; CUDA
// needs T <= kAttentionMaxSeqLenCuda. Work runs on the current stream; thread-safe as the ops
// are. Details: docs/ops.md#attention.
#pragma once

#include <cstdint>
#include <vector>

#include "stoker/core/tensor.h"

namespace stoker::ops {

inline constexpr int64_t kAttentionMaxSeqLenCuda = 2048;

// out [B, T, H D], heads [3, B, H, T, D], probs [B, H, T, T] are written; qkv
// [B, T, (H + 2 KV) D] is read (D = qkv.size(2) / (H + 2 KV)). H = num_heads; KV = num_kv_heads
// (0: H), dividing H: query head h attends with key/value head h / (H / KV), and `heads` holds
// the key and value heads expanded to H (the unfused composition, as transformers' repeat_kv).
// Query i sees key j iff j <= i, and with positions (i32 or i64 [B, T] on qkv's device, each
// token's position in its document: 0 at a document's first token, as data::Batch::positions)
// also i - positions[i] <= j: tokens of earlier documents are masked (probability exactly 0).
// A position above i reaches back to key 0, a negative one is read as 0. Undefined positions:
// plain causal attention.
void attention_forward(const Tensor& out, const Tensor& heads, const Tensor& probs,
                       const Tensor& qkv, int64_t num_heads, int64_t num_kv_heads = 0,
                       const Tensor& positions = Tensor());
// dqkv [B, T, (H + 2 KV) D] is overwritten (each key/value head's gradient the sum over its
// group's query heads); dout [B, T, H D] and the forward's heads and probs are read. H is
// heads.size(2) (num_heads: 0, or checked against it); num_kv_heads and positions as given to
// the forward.
void attention_backward(const Tensor& dqkv, const Tensor& dout, const Tensor& heads,
                        const Tensor& probs, int64_t num_heads = 0, int64_t num_kv_heads = 0,
                        const Tensor& positions = Tensor());

// ---- Rotary position embeddings (Llama's RoPE), applied to a QKV projection's output ----
//
// The frequencies of a config.json's rope_theta and rope_scaling (rope_type "default", or
// "llama3" with factor, low_freq_factor, high_freq_factor, original_max_position_embeddings).
struct RopeOptions {
  int64_t head_dim = 64;    // D, even
  double theta = 500000.0;  // rope_theta
  bool llama3_scaling = false;
  double factor = 8.0;  // the llama3 fields (Llama 3.1: 8, 1, 4, 8192; Llama 3.2: factor 32)
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};
// The D / 2 inverse frequencies with transformers' float32 arithmetic, step by step, so they
// equal its _compute_default_rope_parameters / _compute_llama3_parameters (CPU) values:
// inv_freq[i] = 1 / theta^(2i / D), then, with llama3 scaling, wavelen = 2 pi / inv_freq kept
// above original_max_position_embeddings / high_freq_factor, divided by factor beyond
// original_max_position_embeddings / low_freq_factor, and smoothly interpolated between.
std::vector<float> rope_inverse_frequencies(const RopeOptions& options);

// In place on qkv [..., (H + 2 KV) * D] — per token the H query heads, the KV key heads, the KV
// value heads (Hugging Face's q_proj, k_proj, v_proj outputs side by side; grouped-query
// attention when KV < H) — rotates every query and key head by its token's position; the value
// heads are left alone. Hugging Face Llama's rotate-half convention (not interleaved pairs): with
// a = x[i], b = x[i + D/2] for i < D/2 and angle = float(position) * inv_freq[i] (fp32),
//   x[i]       = a * cos - b * sin
//   x[i + D/2] = b * cos + a * sin
// where cos and sin are rounded to qkv's dtype first and each product and sum once, as
// transformers' apply_rotary_pos_emb rounds them. positions: i32 or i64, one per token (qkv's
// element count / ((H + 2 KV) D)), given explicitly so that packed sequences can restart them at
// each document; inv_freq: f32 [D / 2] (rope_inverse_frequencies) on qkv's device.
void rope_qkv_forward(const Tensor& qkv, const Tensor& positions, const Tensor& inv_freq,
                      int64_t num_heads, int64_t num_kv_heads);
// The backward, in place on the gradient dqkv of the rotated qkv: the inverse rotation (sin
// negated) of its query and key heads, the value heads' gradient left alone.
void rope_qkv_backward(const Tensor& dqkv, const Tensor& positions, const Tensor& inv_freq,
                       int64_t num_heads, int64_t num_kv_heads);

}  // namespace stoker::ops
