// Private: backend entry points of the RMS normalization ops of ops/layernorm.h (dispatch.h has
// the convention). CPU: src/ops/cpu/rmsnorm.cpp; CUDA: kernels/rmsnorm.cu.
#pragma once

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(rmsnorm_forward, void(const Tensor& y, const Tensor& rstd, const Tensor& x,
                                          const Tensor& weight, float eps));
// dx may alias dy.
STOKER_DECLARE_STUB(rmsnorm_backward,
                    void(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                         const Tensor& rstd, const Tensor& weight));
// sum may alias x or residual; dsum may alias dy and/or dsum_in.
STOKER_DECLARE_STUB(add_rmsnorm_forward,
                    void(const Tensor& y, const Tensor& sum, const Tensor& rstd, const Tensor& x,
                         const Tensor& residual, const Tensor& weight, float eps));
STOKER_DECLARE_STUB(add_rmsnorm_backward,
                    void(const Tensor& dsum, const Tensor& dweight, const Tensor& dy,
                         const Tensor& dsum_in, const Tensor& sum, const Tensor& rstd,
                         const Tensor& weight));

}  // namespace stoker::ops
