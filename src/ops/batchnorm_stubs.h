// Private: backend entry points of ops/batchnorm.h (dispatch.h has the convention).
// CPU: src/ops/cpu/batchnorm.cpp; CUDA: src/ops/cuda/batchnorm_cudnn.cpp (cuDNN;
// kernels/batchnorm_nhwc.cu where it applies).
#pragma once

#include "ops/dispatch.h"
#include "stoker/ops/batchnorm.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(batchnorm_forward_train,
                    void(const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd,
                         const Tensor& running_mean, const Tensor& running_var, const Tensor& x,
                         const Tensor& gamma, const Tensor& beta, const BatchNormParams& p,
                         const Tensor& residual));
STOKER_DECLARE_STUB(batchnorm_forward_train_from_sums,
                    void(const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd,
                         const Tensor& running_mean, const Tensor& running_var, const Tensor& x,
                         const Tensor& sum, const Tensor& sum_sq, const Tensor& gamma,
                         const Tensor& beta, const BatchNormParams& p, const Tensor& residual));
STOKER_DECLARE_STUB(batchnorm_forward_eval,
                    void(const Tensor& y, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                         const Tensor& running_mean, const Tensor& running_var,
                         const BatchNormParams& p, const Tensor& residual));
STOKER_DECLARE_STUB(batchnorm_backward,
                    void(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                         const Tensor& dy, const Tensor& x, const Tensor& gamma,
                         const Tensor& save_mean, const Tensor& save_invstd,
                         const BatchNormParams& p, const Tensor& y, const Tensor& dresidual,
                         const Tensor& beta));

}  // namespace stoker::ops
