// Private: backend entry points of ops/gemm.h (dispatch.h has the convention).
// CPU: src/ops/cpu/gemm.cpp; CUDA: src/ops/cuda/gemm_cublaslt.cpp (cuBLASLt).
#pragma once

#include "ops/dispatch.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(gemm,
                    void(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& o));

}  // namespace stoker::ops
