// CausalSelfAttention: GPT-2's multi-head causal self-attention block (without the residual).
//
//   qkv = Linear(C, 3C)(x)                x [B, T, C] → [B, T, 3C]; q, k, v are the three
//                                          consecutive C-wide slices, each split into `heads`
//                                          heads of D = C / heads (PyTorch's layout)
//   a_h = softmax(q_h k_h^T / sqrt(D) + causal mask) v_h     per batch row and head h
//   y   = Linear(C, C)(concat_h a_h)      → [B, T, C] in x's dtype
//
// The children are named "qkv" and "proj" (parameters "qkv.weight", "qkv.bias", "proj.weight",
// "proj.bias"), so a block holding it as `attn` loads a PyTorch module with `self.attn.qkv`
// and `self.attn.proj`. Initialization is nn::Linear's (PyTorch's default for nn.Linear).
//
// dtypes: x may be f32, bf16 or f16; the Linears run as under mixed precision (the weights'
// half compute copies, fp32 weight gradients), the attention core (ops/attention.h) runs its
// GEMMs in x's dtype with fp32 accumulation and the softmax in fp32.
//
// Saved for backward (while saving_activations(), docs/architecture.md#modules): the qkv Linear
// keeps x, the proj Linear keeps the attention output a [B, T, C]; this module keeps q, k, v
// permuted per head [3, B, H, T, D] (the qkv output's size, 3BTC) and the softmax probabilities
// P [B, H, T, T], both in x's dtype (P dominates at long sequences: 12 heads × 1024² × 2 bytes
// = 24 MiB per sample in bf16). All are released by backward.
// Inside a Checkpoint's first forward nothing is kept; forward_for_backward runs the whole
// attention (P, or lse, is needed) but skips proj's GEMM.
//
// Attention core (AttentionKernel; default from_env): `math` is the unfused path above;
// `fused` runs ops/flash_attention.h (FlashAttention-2 style kernels) where it is supported —
// CUDA, bf16/f16, head dim 64 — and the math path elsewhere. The fused path saves the qkv
// Linear's output (3BTC, which replaces the per-head copy), the attention output a (already
// kept by proj, so shared) and lse [B, H, T] f32, instead of the per-head copy and P: at GPT-2
// 124M's B 16, T 1024, H 12 that drops P's 384 MiB per layer in bf16 (plus the backward's dP
// scratch of the same size). from_env reads the environment variable STOKER_ATTENTION at each
// forward: unset, empty or "fused" selects fused (the default; checked on the H200 against the
// CPU reference and the math path), "math" selects math; any other value is an error.
//
// No attention dropout. Work runs on the current stream of the module's device. Not
// thread-safe.
#pragma once

#include <memory>

#include "stoker/nn/linear.h"
#include "stoker/nn/module.h"

namespace stoker::nn {

// Which attention core CausalSelfAttention runs (see above).
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
