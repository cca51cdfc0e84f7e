// The bias parts of a linear layer (the matrix parts are ops::gemm).
#pragma once

#include "stoker/core/tensor.h"

namespace stoker::ops {

// y[i, j] += bias[j] for y [N, C] (float dtype) and bias [C] (f32).
void add_bias(const Tensor& y, const Tensor& bias);
// dbias[j] += sum_i dy[i, j] for dy [N, C] (float dtype) and dbias [C] (f32), fp32
// accumulation, deterministic (no atomics across rows).
void bias_grad(const Tensor& dbias, const Tensor& dy);

}  // namespace stoker::ops
