// Activations and dropout, forward and backward. Float tensors (f32, f16, bf16), fp32 math,
// one rounding to the output dtype; all tensors one device, equal element counts.
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

}  // namespace stoker::ops
