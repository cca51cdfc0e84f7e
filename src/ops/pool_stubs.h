// Private: backend entry points of ops/pool.h (dispatch.h has the convention).
// CPU: src/ops/cpu/pool.cpp, channel.cpp (global_avgpool); CUDA: src/ops/cuda/pool_cudnn.cpp
// (cuDNN), kernels/maxpool_nhwc.cu (argmax), kernels/channel.cu (global_avgpool).
#pragma once

#include "ops/dispatch.h"
#include "stoker/ops/layout.h"
#include "stoker/ops/pool.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(maxpool2d_forward,
                    void(const Tensor& y, const Tensor& x, const Pool2dParams& p));
STOKER_DECLARE_STUB(maxpool2d_backward, void(const Tensor& dx, const Tensor& dy, const Tensor& x,
                                             const Tensor& y, const Pool2dParams& p));
STOKER_DECLARE_STUB(maxpool2d_forward_argmax, void(const Tensor& y, const Tensor& argmax,
                                                   const Tensor& x, const Pool2dParams& p));
STOKER_DECLARE_STUB(maxpool2d_backward_argmax, void(const Tensor& dx, const Tensor& dy,
                                                    const Tensor& argmax, const Pool2dParams& p));
STOKER_DECLARE_STUB(avgpool2d_forward,
                    void(const Tensor& y, const Tensor& x, const Pool2dParams& p));
STOKER_DECLARE_STUB(avgpool2d_backward,
                    void(const Tensor& dx, const Tensor& dy, const Pool2dParams& p));
STOKER_DECLARE_STUB(global_avgpool_forward, void(const Tensor& y, const Tensor& x, Layout layout));
STOKER_DECLARE_STUB(global_avgpool_backward,
                    void(const Tensor& dx, const Tensor& dy, Layout layout));

}  // namespace stoker::ops
