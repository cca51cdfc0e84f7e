// Private: backend entry points of ops/embedding.h (dispatch.h has the convention).
// CPU: src/ops/cpu/embedding.cpp; CUDA: kernels/embedding.cu.
#pragma once

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(embedding_forward,
                    void(const Tensor& y, const Tensor& ids, const Tensor& table));
STOKER_DECLARE_STUB(embedding_backward,
                    void(const Tensor& dtable, const Tensor& dy, const Tensor& ids));

}  // namespace stoker::ops
