// Self-attention blocks (without the residual): CausalSelfAttention, GPT-2's multi-head
// attention — qkv = Linear(C, 3C)(x), per-head softmax(q k^T / sqrt(D) + causal mask) v,
// proj = Linear(C, C), children "qkv" and "proj" (PyTorch's names) — and GroupedQueryAttention,
// Llama's: qkv_proj, RoPE, grouped-query attention with an optional document mask, o_proj.
// x may be f32, bf16 or f16. The core is the fused FlashAttention-style kernel where supported,
// else the math path (AttentionKernel, or STOKER_ATTENTION=math|fused). Saved: the math path
// keeps q, k, v per head (3 x B H T D) and P [B, H, T, T]; the fused path the qkv output and lse
// [B, H, T] f32. No attention dropout. Modules own their children and saved tensors; work runs
// on the current stream of the module's device. Not thread-safe.
// Details: docs/ops.md#attention.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "stoker/nn/linear.h"
#include "stoker/nn/module.h"
#include "stoker/ops/attention.h"

namespace stoker::nn {

// Which attention core the attention modules run (docs/ops.md#attention).
enum class AttentionKernel { from_env, math, fused };

class CausalSelfAttention : public Module {
 public:
  // d_model = C, divisible by heads.
  CausalSelfAttention(int64_t d_model, int64_t heads,
                      AttentionKernel kernel = AttentionKernel::from_env);

  // x [B, T, C] → y [B, T, C] in x's dtype.
  Tensor forward(const Tensor& x) override;
  // Saves what forward saves; proj's GEMM is skipped.
  void forward_for_backward(const Tensor& x) override;
  // dy [B, T, C] → dx [B, T, C]; adds into the four parameter gradients.
  Tensor backward(const Tensor& dy) override;

  std::string describe() const override;

  Linear& qkv() { return *qkv_; }
  Linear& proj() { return *proj_; }
  int64_t d_model() const { return d_model_; }
  int64_t heads() const { return heads_; }
  AttentionKernel attention_kernel() const { return kernel_; }
  // Takes effect at the next forward (a pending backward uses what its forward saved).
  void set_attention_kernel(AttentionKernel kernel) { kernel_ = kernel; }

 private:
  int64_t d_model_, heads_;
  AttentionKernel kernel_;
  Linear* qkv_ = nullptr;  // registered children "qkv" and "proj"
  Linear* proj_ = nullptr;
  Tensor qkv_heads_;                 // math: saved q, k, v per head [3, B, H, T, D]
  Tensor probs_;                     // math: saved P [B, H, T, T]
  Tensor qkv_out_, attn_out_, lse_;  // fused: saved qkv [B, T, 3C], a [B, T, C], lse [B, H, T]
  bool use_fused(const Tensor& qkv) const;
  Tensor attention(const Tensor& x);  // qkv Linear + attention core; saves when saving
};

struct GroupedQueryAttentionOptions {
  int64_t heads = 0;      // H query heads
  int64_t kv_heads = 0;   // KV key/value heads, dividing H (0: H)
  int64_t head_dim = 0;   // D (0: d_model / H)
  bool bias = false;      // Llama: no biases
  ops::RopeOptions rope;  // RoPE's frequencies (rope.head_dim is taken from head_dim)
  bool use_rope = true;
  AttentionKernel kernel = AttentionKernel::from_env;
};

// Llama's attention block without the residual (transformers' LlamaAttention, eager or sdpa):
//   qkv = qkv_proj(x) [B, T, (H + 2 KV) D]; RoPE on its query and key heads, in place
//   (ops::rope_qkv_forward, at the given positions or 0..T-1); a = grouped-query causal
//   attention over qkv (query head h reads key/value head h / (H / KV)), with the document mask
//   when asked; y = o_proj(a) [B, T, C].
// Children "qkv_proj" (weight [(H + 2 KV) D, C]: Hugging Face's q_proj, k_proj and v_proj weights
// concatenated along dim 0, in that order) and "o_proj" (weight [C, H D]). Under a Llama
// model's "layers.<l>.self_attn" the names are "layers.<l>.self_attn.qkv_proj.weight" and
// "...o_proj.weight". The RoPE inverse frequencies are computed once (ops::
// rope_inverse_frequencies) and kept, f32 [D / 2], on the module's device (not a weight).
class GroupedQueryAttention : public Module {
 public:
  // d_model = C; options.heads > 0, kv_heads dividing it, head_dim even when use_rope.
  GroupedQueryAttention(int64_t d_model, GroupedQueryAttentionOptions options);

  // x [B, T, C] → y [B, T, C] in x's dtype.
  Tensor forward(const Tensor& x) override;
  // Saves what forward saves; o_proj's GEMM is skipped.
  void forward_for_backward(const Tensor& x) override;
  // dy [B, T, C] → dx [B, T, C]; adds into the parameter gradients. Uses the positions its
  // forward used, whatever set_positions did since.
  Tensor backward(const Tensor& dy) override;

  // Positions [B, T] (i32/i64 on the module's device: each token's position in its document,
  // as data::Batch::positions) for RoPE and, with document_mask, for the mask of the next
  // forwards (kept, so a checkpoint's recomputation sees the same). Undefined (the default):
  // 0..T-1 for RoPE and plain causal attention; document_mask then must be false.
  void set_positions(const Tensor& positions, bool document_mask);
  const Tensor& positions() const { return positions_; }
  bool document_mask() const { return document_mask_; }

  std::string describe() const override;

  Linear& qkv_proj() { return *qkv_proj_; }
  Linear& o_proj() { return *o_proj_; }
  int64_t d_model() const { return d_model_; }
  int64_t heads() const { return options_.heads; }
  int64_t kv_heads() const { return options_.kv_heads; }
  int64_t head_dim() const { return options_.head_dim; }
  // The options with kv_heads, head_dim and rope.head_dim resolved.
  const GroupedQueryAttentionOptions& options() const { return options_; }
  AttentionKernel attention_kernel() const { return options_.kernel; }
  // Takes effect at the next forward (a pending backward uses what its forward saved).
  void set_attention_kernel(AttentionKernel kernel) { options_.kernel = kernel; }

 private:
  int64_t d_model_;
  GroupedQueryAttentionOptions options_;
  Linear* qkv_proj_ = nullptr;  // registered children "qkv_proj" and "o_proj"
  Linear* o_proj_ = nullptr;
  std::vector<float> inv_freq_host_;  // RoPE's D / 2 inverse frequencies
  Tensor inv_freq_;                   // ... on the module's device (made at first use there)
  Tensor positions_;                  // set_positions
  bool document_mask_ = false;
  Tensor arange_;                    // cached 0..T-1 per row [B, T] i32, the default positions
  Tensor rope_pos_, mask_pos_;       // what the saving forward used (mask_pos_: undefined = causal)
  Tensor qkv_heads_, probs_;         // math: saved q, k, v per head [3, B, H, T, D] and P
  Tensor qkv_out_, attn_out_, lse_;  // fused: saved qkv (after RoPE), a [B, T, H D], lse
  Tensor attention(const Tensor& x);  // qkv_proj + RoPE + attention core; saves when saving
  const Tensor& inv_freq();
  const Tensor& default_positions(int64_t b, int64_t t);
};

}  // namespace stoker::nn
