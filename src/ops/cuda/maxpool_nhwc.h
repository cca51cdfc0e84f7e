// Private: stoker's own CUDA max-pooling backward for channels-last tensors
// (kernels/maxpool_nhwc.cu), called by pool_cudnn.cpp where ops::maxpool2d_argmax_supported says
// the kernels take the problem.
// Same contract as ops::maxpool2d_backward (y is not needed: the kernel finds each window's
// first maximum in x again); the result equals the CPU reference bit for bit. The caller holds a
// DeviceScope for x's device.
#pragma once

#include "stoker/core/tensor.h"
#include "stoker/ops/pool.h"

namespace stoker::ops::cuda {

void maxpool_nhwc_backward(const Tensor& dx, const Tensor& dy, const Tensor& x,
                           const Pool2dParams& p);

}  // namespace stoker::ops::cuda
