// Private: stoker's own CUDA batch-norm kernels for channels-last (NHWC) training
// (kernels/batchnorm_nhwc.cu), called by batchnorm_cudnn.cpp for layout == nhwc. Same contract
// as the training forward and the backward of stoker/ops/batchnorm.h; x, y, dy, dx are viewed as
// [M = N*H*W, C] row-major. Both apply the fused ReLU of
// BatchNormParams::relu and the residual tail inside their passes; the backward rebuilds the
// ReLU's mask from x when beta is defined and dresidual is not (y is then not read). The caller
// holds a DeviceScope for x's device.
#pragma once

#include "stoker/core/tensor.h"
#include "stoker/ops/batchnorm.h"

namespace stoker::ops::cuda {

void batchnorm_nhwc_forward_train(const Tensor& y, const BatchNormSaved& saved,
                                  const BatchNormRunning& running, const BatchNormInput& in,
                                  const BatchNormParams& p);
void batchnorm_nhwc_forward_train_from_sums(const Tensor& y, const BatchNormSaved& saved,
                                            const BatchNormRunning& running,
                                            const BatchNormInput& in, const BatchNormSums& sums,
                                            const BatchNormParams& p);
void batchnorm_nhwc_backward(const BatchNormGrads& grads, const Tensor& dy,
                             const BatchNormInput& in, const BatchNormSaved& saved,
                             const BatchNormParams& p, const Tensor& y);

}  // namespace stoker::ops::cuda
