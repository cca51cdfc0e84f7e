// Private: backend entry points of ops/activation.h (dispatch.h has the convention).
// CPU: src/ops/cpu/activation.cpp; CUDA: kernels/activation.cu.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(relu_forward, void(const Tensor& y, const Tensor& x));
STOKER_DECLARE_STUB(relu_backward, void(const Tensor& dx, const Tensor& dy, const Tensor& y));
STOKER_DECLARE_STUB(gelu_forward, void(const Tensor& y, const Tensor& x));
STOKER_DECLARE_STUB(gelu_backward, void(const Tensor& dx, const Tensor& dy, const Tensor& x));
STOKER_DECLARE_STUB(dropout_forward, void(const Tensor& y, const Tensor& x, float p, uint64_t seed,
                                          uint64_t offset));
STOKER_DECLARE_STUB(dropout_backward, void(const Tensor& dx, const Tensor& dy, float p,
                                           uint64_t seed, uint64_t offset));

}  // namespace stoker::ops
