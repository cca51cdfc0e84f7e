// Private: backend entry points of ops/reduce.h (dispatch.h has the convention).
// CPU: src/ops/cpu/reduce.cpp; CUDA: kernels/reduce.cu.
#pragma once

#include <span>

#include "ops/dispatch.h"
#include "stoker/ops/elementwise.h"

namespace stoker::ops {

// out: rank-0 f32 tensor on the same device
STOKER_DECLARE_STUB(reduce, void(std::span<const Tensor> xs, Reduction r, const Tensor& out));

}  // namespace stoker::ops
