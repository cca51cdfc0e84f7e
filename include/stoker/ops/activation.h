// Activations and dropout, forward and backward. Float tensors (f32, f16, bf16), fp32 math,
// one rounding to the output dtype; all tensors one device, equal element counts (SwiGLU, at
// the end, halves the last dimension).
#pragma once

#include <cstdint>

#include "stoker/core/tensor.h"

namespace stoker::ops {

// y = max(x, 0).  (y may alias x.)
void relu_forward(const Tensor& y, const Tensor& x);
// dx = dy * (y > 0), from the forward's OUTPUT y (so x need not be kept). dx may alias dy.
void relu_backward(const Tensor& dx, const Tensor& dy, const Tensor& y);

// GELU, tanh form (PyTorch's approximate="tanh"):
//   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
void gelu_forward(const Tensor& y, const Tensor& x);
// dx = dy * gelu'(x), from the forward's INPUT x. dx may alias dy.
void gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x);

// Inverted dropout with a Philox mask that is never stored: element i is dropped when
// philox_uniform(seed, offset, i, 0, 1) < p, kept ones are scaled by 1 / (1 - p). The backward
// recomputes the same mask from (seed, offset), so recomputation and resume reproduce it.
void dropout_forward(const Tensor& y, const Tensor& x, float p, uint64_t seed, uint64_t offset);
void dropout_backward(const Tensor& dx, const Tensor& dy, float p, uint64_t seed, uint64_t offset);

// SwiGLU, the activation of Llama's MLP, over the output of ONE GEMM with the concatenated
// gate/up weight [2F, D]: x is [..., 2F], each row the gate half then the up half,
//   gate = x[..., 0:F]   (rows 0..F-1 of the weight: Hugging Face's gate_proj.weight)
//   up   = x[..., F:2F]  (rows F..2F-1: up_proj.weight)
//   y [..., F] = silu(gate) * up,   silu(g) = g / (1 + exp(-g))
// with transformers' roundings: silu(gate) is rounded to the dtype before the product (the
// act_fn output is a tensor of the dtype), the product once more. Halves contiguous per row is
// the layout a GEMM epilogue can later produce directly (a tile computing columns j of both
// halves). x and y share a float dtype and device; y must not overlap x.
void swiglu_forward(const Tensor& y, const Tensor& x);
// dx [..., 2F] (overwritten; it may be x itself: the gate/up activation's buffer reused for its
// gradient) from dy [..., F] and the forward's x:
//   d(up)   = dy * silu(gate)                          (silu rounded as in the forward)
//   d(gate) = (dy * up) * silu'(gate),  silu'(g) = s (1 + g (1 - s)), s = sigmoid(g)
// each product rounded to the dtype where autograd's would be.
void swiglu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x);

}  // namespace stoker::ops
