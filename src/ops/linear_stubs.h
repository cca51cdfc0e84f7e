// Private: backend entry points of ops/linear.h (dispatch.h has the convention).
// CPU: src/ops/cpu/linear.cpp; CUDA: kernels/linear.cu.
#pragma once

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(add_bias, void(const Tensor& y, const Tensor& bias));
STOKER_DECLARE_STUB(bias_grad, void(const Tensor& dbias, const Tensor& dy));

}  // namespace stoker::ops
