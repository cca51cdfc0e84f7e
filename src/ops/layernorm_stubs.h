// Private: backend entry points of ops/layernorm.h (dispatch.h has the convention).
// CPU: src/ops/cpu/layernorm.cpp; CUDA: kernels/layernorm.cu.
#pragma once

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(layernorm_forward,
                    void(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                         const Tensor& gamma, const Tensor& beta, float eps));
STOKER_DECLARE_STUB(layernorm_backward,
                    void(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                         const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                         const Tensor& gamma));
// sum may alias x or residual; dsum may alias dy and/or dsum_in (ops/layernorm.h)
STOKER_DECLARE_STUB(add_layernorm_forward,
                    void(const Tensor& y, const Tensor& sum, const Tensor& mean, const Tensor& rstd,
                         const Tensor& x, const Tensor& residual, const Tensor& gamma,
                         const Tensor& beta, float eps));
STOKER_DECLARE_STUB(add_layernorm_backward,
                    void(const Tensor& dsum, const Tensor& dgamma, const Tensor& dbeta,
                         const Tensor& dy, const Tensor& dsum_in, const Tensor& sum,
                         const Tensor& mean, const Tensor& rstd, const Tensor& gamma));

}  // namespace stoker::ops
