// CausalSelfAttention: GPT-2's multi-head causal self-attention block (without the residual):
// qkv = Linear(C, 3C)(x), per-head softmax(q k^T / sqrt(D) + causal mask) v, proj = Linear(C, C).
// Children "qkv" and "proj" (PyTorch's names); x may be f32, bf16 or f16. The core is the fused
// FlashAttention-style kernel where supported, else the math path (AttentionKernel, or
// STOKER_ATTENTION=math|fused). Saved: the math path keeps q, k, v per head (3BTC) and P
// [B, H, T, T]; the fused path the qkv output and lse [B, H, T] f32. No attention dropout.
// Work runs on the current stream of the module's device. Not thread-safe.
// Details: docs/ops.md#attention.
#pragma once

#include <memory>

#include "stoker/nn/linear.h"
#include "stoker/nn/module.h"

namespace stoker::nn {

// Which attention core CausalSelfAttention runs (docs/ops.md#attention).
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

}  // namespace stoker::nn
