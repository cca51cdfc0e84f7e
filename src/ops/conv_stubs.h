// Private: backend entry points of ops/conv.h (dispatch.h has the convention).
// CPU: src/ops/cpu/conv.cpp, channel.cpp; CUDA: src/ops/cuda/conv_cudnn.cpp, conv_stats_cudnn.cpp
// (cuDNN), kernels/channel.cu.
#pragma once

#include <string>

#include "ops/dispatch.h"
#include "stoker/ops/conv.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(add_channel_bias, void(const Tensor& y, const Tensor& bias, Layout layout));
STOKER_DECLARE_STUB(channel_bias_grad, void(const Tensor& dbias, const Tensor& dy, Layout layout));
STOKER_DECLARE_STUB(conv2d_forward,
                    void(const Tensor& y, const Tensor& x, const Tensor& w, const Conv2dParams& p));
STOKER_DECLARE_STUB(conv2d_backward_data, void(const Tensor& dx, const Tensor& dy, const Tensor& w,
                                               const Conv2dParams& p, bool accumulate));
STOKER_DECLARE_STUB(conv2d_backward_filter,
                    void(const Tensor& dw, const Tensor& dy, const Tensor& x, const Conv2dParams& p,
                         bool accumulate));
STOKER_DECLARE_STUB(conv2d_forward_stats,
                    void(const Tensor& y, const Tensor& sum, const Tensor& sum_sq, const Tensor& x,
                         const Tensor& w, const Conv2dParams& p));
STOKER_DECLARE_STUB(conv2d_forward_stats_unsupported,
                    std::string(const Tensor& x, const Tensor& w, const Conv2dParams& p));

}  // namespace stoker::ops
