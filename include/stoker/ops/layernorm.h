// Layer normalization over the last dimension: x [N, C] (any leading dims flattened into N).
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

}  // namespace stoker::ops
