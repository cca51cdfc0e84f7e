// Private: backend entry points of ops/layout.h (convert_layout) (dispatch.h has the convention).
// CPU: src/ops/cpu/channel.cpp; CUDA: kernels/channel.cu.
#pragma once

#include "ops/dispatch.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(convert_layout,
                    void(const Tensor& dst, const Tensor& src, Layout from, Layout to));

}  // namespace stoker::ops
