// Private: backend entry points of ops/elementwise.h (dispatch.h has the convention).
// CPU: src/ops/cpu/elementwise.cpp; CUDA: kernels/elementwise.cu.
#pragma once

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(add, void(const Tensor& out, const Tensor& a, const Tensor& b));
STOKER_DECLARE_STUB(mul, void(const Tensor& out, const Tensor& a, const Tensor& b));
STOKER_DECLARE_STUB(axpy, void(const Tensor& y, float alpha, const Tensor& x));
STOKER_DECLARE_STUB(scale, void(const Tensor& x, float alpha));
STOKER_DECLARE_STUB(scale_by, void(const Tensor& x, const Tensor& factor));

}  // namespace stoker::ops
