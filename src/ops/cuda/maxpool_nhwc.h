// Private: stoker's own CUDA max-pooling backward for channels-last tensors
// (kernels/maxpool_nhwc.cu), called by pool_cudnn.cpp when maxpool_nhwc_backward_supported(p).
// Same contract as ops::maxpool2d_backward (y is not needed: the kernel finds each window's
// first maximum in x again); the result equals the CPU reference bit for bit. The caller holds a
// DeviceScope for x's device.
#pragma once

#include "stoker/core/tensor.h"
#include "stoker/ops/pool.h"

namespace stoker::ops::cuda {

// NHWC with at most 256 window positions (the argmax is kept as one byte) and x below 2^30
// elements (32-bit indexing).
bool maxpool_nhwc_backward_supported(const Tensor& x, const Pool2dParams& p);

void maxpool_nhwc_backward(const Tensor& dx, const Tensor& dy, const Tensor& x,
                           const Pool2dParams& p);

}  // namespace stoker::ops::cuda
