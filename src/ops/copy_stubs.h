// Private: backend entry points of ops/copy.h (fill, cast) (dispatch.h has the convention).
// CPU: src/ops/cpu/copy.cpp; CUDA: kernels/copy.cu.
#pragma once

#include <span>

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(fill, void(const Tensor& out, double value));
// float dtypes; also same-dtype copy
STOKER_DECLARE_STUB(cast, void(const Tensor& dst, const Tensor& src));
STOKER_DECLARE_STUB(cast_multi, void(std::span<const Tensor> dsts, std::span<const Tensor> srcs));

}  // namespace stoker::ops
