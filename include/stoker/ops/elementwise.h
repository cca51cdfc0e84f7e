// Elementwise arithmetic on float tensors (f32, f16, bf16). Math is done in fp32 and rounded
// once to the output dtype, so results match the CPU reference to the output's rounding.
// Shapes must have equal element counts (no broadcasting); all tensors on one device.
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::ops {

// out = a + b (a, b, out share one dtype; out may alias a or b).
void add(const Tensor& out, const Tensor& a, const Tensor& b);
// out = a * b (a, b, out share one dtype; out may alias a or b).
void mul(const Tensor& out, const Tensor& a, const Tensor& b);
// y += alpha * x (x and y may have different float dtypes, e.g. fp16 x into fp32 y).
void axpy(const Tensor& y, float alpha, const Tensor& x);
// x *= alpha, in place.
void scale(const Tensor& x, float alpha);
// x *= factor, in place, with `factor` a one-element f32 tensor on x's device read by the kernel
// (e.g. the loss scale, which never visits the host).
void scale_by(const Tensor& x, const Tensor& factor);

}  // namespace stoker::ops
