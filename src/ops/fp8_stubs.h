// Private: backend entry points of the FP8 ops (ops/fp8.h, ops/gemm_fp8.h; dispatch.h has the
// convention). CPU: src/ops/cpu/fp8.cpp; CUDA: kernels/fp8.cu, src/ops/cuda/gemm_cublaslt.cpp.
// The shared arithmetic: fp8_math.h.
#pragma once

#include "ops/dispatch.h"
#include "stoker/core/half.h"
#include "stoker/ops/fp8.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(fp8_quantize, void(const Tensor& codes, const Tensor& x, const Tensor& scale,
                                       core::Fp8Format format));
// factor_is_inverse: y = value * factor (a scale_inv), else y = value / factor
STOKER_DECLARE_STUB(fp8_dequantize, void(const Tensor& y, const Tensor& codes, const Tensor& factor,
                                         core::Fp8Format format, bool factor_is_inverse));
STOKER_DECLARE_STUB(fp8_cast_transpose, void(const Fp8CastOutputs& out, const Tensor& x,
                                             const Tensor& scale, core::Fp8Format format));
STOKER_DECLARE_STUB(fp8_update_scale, void(const Tensor& scale, const Tensor& history,
                                           const Tensor& amax, core::Fp8Format format, int margin));
// ops::gemm_fp8 through cuBLASLt; false (nothing done) where it has no FP8 algorithm for the
// call: the caller runs the reference composition (src/ops/gemm_fp8.cpp).
STOKER_DECLARE_CUDA_STUB(gemm_fp8, bool(const Tensor& c, const Fp8Tensor& a, const Fp8Tensor& b,
                                        const GemmOptions& o));

}  // namespace stoker::ops
