// Private: backend entry points of ops/random.h (dispatch.h has the convention).
// CPU: src/ops/cpu/random.cpp; CUDA: kernels/random.cu.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(random_uniform,
                    void(const Tensor& out, float lo, float hi, uint64_t seed, uint64_t offset));
STOKER_DECLARE_STUB(random_normal,
                    void(const Tensor& out, float mean, float std, uint64_t seed, uint64_t offset));

}  // namespace stoker::ops
