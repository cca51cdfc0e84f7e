// Layer normalization and RMS normalization (below) over the last dimension: x [N, C] (any
// leading dims flattened into N). Layer normalization:
//   y = (x - mean) * rstd * gamma + beta,  rstd = 1 / sqrt(var + eps), biased variance.
// x and y share a float dtype; gamma, beta, dgamma, dbeta are f32 [C]; mean and rstd are f32
// [N] saved for the backward. Statistics and all math in fp32.
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::ops {

void layernorm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& gamma, const Tensor& beta, float eps);
// dx = gradient w.r.t. x (overwritten); dgamma and dbeta are ACCUMULATED (+=).
void layernorm_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& gamma);

// Fused residual add + layer norm, the `h = x + residual; z = ln(h)` of a pre-LayerNorm
// transformer block, in one pass over each row:
//   sum = x + residual      (x's dtype: each element rounded once, as ops::add rounds it)
//   y   = (sum - mean) * rstd * gamma + beta
// The statistics are taken from the ROUNDED sum, so mean, rstd and y are what
// layernorm_forward(y, mean, rstd, sum, gamma, beta, eps) gives on `sum` (the same bits on the
// CPU and on CUDA). x, residual, sum and y share a float dtype and element count; the rest as in
// layernorm_forward. `sum` may be x or residual itself (the add in place); y must not overlap
// x, residual or sum.
void add_layernorm_forward(const Tensor& y, const Tensor& sum, const Tensor& mean,
                           const Tensor& rstd, const Tensor& x, const Tensor& residual,
                           const Tensor& gamma, const Tensor& beta, float eps);
// The backward of add_layernorm_forward, with dsum_in the gradient that reaches `sum` by the
// other path (the residual stream):
//   dsum = layernorm_backward(dy) + dsum_in
// The layer-norm gradient is rounded to the dtype before the add, as the unfused
// layernorm_backward + ops::add round it, so dsum has the unfused pair's bits. dsum (overwritten)
// may be dsum_in and/or dy itself (in place: no extra buffer); otherwise it must not overlap
// them, nor sum. dgamma and dbeta are ACCUMULATED (+=), as in layernorm_backward.
void add_layernorm_backward(const Tensor& dsum, const Tensor& dgamma, const Tensor& dbeta,
                            const Tensor& dy, const Tensor& dsum_in, const Tensor& sum,
                            const Tensor& mean, const Tensor& rstd, const Tensor& gamma);

// RMS normalization over the last dimension (Llama's RMSNorm), with Hugging Face's
// LlamaRMSNorm roundings:
//   rstd = 1 / sqrt(mean(x^2) + eps)     per row, fp32 (fp64 on the CPU reference), saved [N]
//   h    = x * rstd, rounded to x's dtype (LlamaRMSNorm casts back to the input dtype here,
//                                          before the weight multiplies)
//   y    = weight * h, rounded to x's dtype
// x and y share a float dtype and element count; weight f32 [C]; rstd f32 [N]. With weights
// that are bf16 values (a bf16 checkpoint), y has the bits of transformers' bf16 module, up to
// the rounding of rstd (the fp32 product of two bf16 values is exact).
void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     float eps);
// With xn = x * rstd (unrounded) and g = dy * weight:
//   dx = rstd * (g - xn * mean(g * xn))       overwritten; dx may be dy itself
//   dweight += sum_rows dy * h                ACCUMULATED; h = the forward's rounded x * rstd
// Only the per-row rstd is read from the forward (h and xn are rebuilt from x).
void rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                      const Tensor& rstd, const Tensor& weight);
// The residual add of a pre-norm block fused in, as add_layernorm_forward: sum = x + residual
// (rounded once to the dtype; `sum` may be x or residual itself), y = rmsnorm(sum), the
// statistics taken from the rounded sum, so the results are rmsnorm_forward's on `sum`.
void add_rmsnorm_forward(const Tensor& y, const Tensor& sum, const Tensor& rstd, const Tensor& x,
                         const Tensor& residual, const Tensor& weight, float eps);
// dsum = rmsnorm_backward(dy) (rounded to the dtype) + dsum_in; dsum may be dy and/or dsum_in
// itself; dweight ACCUMULATED as in rmsnorm_backward.
void add_rmsnorm_backward(const Tensor& dsum, const Tensor& dweight, const Tensor& dy,
                          const Tensor& dsum_in, const Tensor& sum, const Tensor& rstd,
                          const Tensor& weight);

}  // namespace stoker::ops
