// Private: backend entry points of ops/batchnorm.h (dispatch.h has the convention).
// CPU: src/ops/cpu/batchnorm.cpp; CUDA: src/ops/cuda/batchnorm_cudnn.cpp (cuDNN;
// kernels/batchnorm_nhwc.cu where it applies).
#pragma once

#include "ops/dispatch.h"
#include "stoker/ops/batchnorm.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(batchnorm_forward_train,
                    void(const Tensor& y, const BatchNormSaved& saved,
                         const BatchNormRunning& running, const BatchNormInput& in,
                         const BatchNormParams& p));
STOKER_DECLARE_STUB(batchnorm_forward_train_from_sums,
                    void(const Tensor& y, const BatchNormSaved& saved,
                         const BatchNormRunning& running, const BatchNormInput& in,
                         const BatchNormSums& sums, const BatchNormParams& p));
STOKER_DECLARE_STUB(batchnorm_forward_eval,
                    void(const Tensor& y, const BatchNormInput& in, const BatchNormRunning& running,
                         const BatchNormParams& p));
STOKER_DECLARE_STUB(batchnorm_backward,
                    void(const BatchNormGrads& grads, const Tensor& dy, const BatchNormInput& in,
                         const BatchNormSaved& saved, const BatchNormParams& p, const Tensor& y));

}  // namespace stoker::ops
