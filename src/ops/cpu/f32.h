// Private: the fp32 working tensors of the CPU ops that compute in fp32 through BLAS (GEMM,
// batched GEMM, convolution): a half input is widened once, a half output rounded once at the
// end, matching the GPU's "fp32 accumulate, round once".
#pragma once

#include "ops/copy_stubs.h"

namespace stoker::ops::cpu {

// `t` itself when it is f32, else a widened copy.
inline Tensor as_f32(const Tensor& t) {
  if (t.dtype() == DType::f32) return t;
  Tensor f = Tensor::empty(t.shape(), DType::f32, Device::cpu());
  cast_impl(f, t);
  return f;
}

// An f32 tensor to compute an output into: `t` itself when it is f32, else a scratch tensor.
inline Tensor f32_target(const Tensor& t) {
  return t.dtype() == DType::f32 ? t : Tensor::empty(t.shape(), DType::f32, Device::cpu());
}

// An f32 tensor to accumulate C = alpha * op(A) op(B) + beta * C into: C itself when it is f32,
// else a scratch tensor that holds C widened when beta != 0 (beta = 0 must not read C).
inline Tensor f32_accumulator(const Tensor& c, float beta) {
  if (c.dtype() == DType::f32) return c;
  Tensor c32 = Tensor::empty(c.shape(), DType::f32, Device::cpu());
  if (beta != 0.0f) cast_impl(c32, c);
  return c32;
}

}  // namespace stoker::ops::cpu
