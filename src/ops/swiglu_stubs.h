// Private: backend entry points of ops::swiglu_forward / swiglu_backward (ops/activation.h;
// dispatch.h has the convention). CPU: src/ops/cpu/swiglu.cpp; CUDA: kernels/swiglu.cu.
// x and dx are [N, 2F], y and dy [N, F] (flat rows); dx may be x itself.
#pragma once

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(swiglu_forward, void(const Tensor& y, const Tensor& x));
STOKER_DECLARE_STUB(swiglu_backward, void(const Tensor& dx, const Tensor& dy, const Tensor& x));

}  // namespace stoker::ops
