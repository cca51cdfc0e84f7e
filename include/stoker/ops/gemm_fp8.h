// FP8 GEMM (the tensor cores of Ada and Hopper): C [M, N] = alpha * A B^T + beta C (+ bias, and
// the GELU epilogues of ops/gemm.h), where A [M, K] and B [N, K] are FP8 matrices
// (ops::Fp8Tensor) read as fp8_value(code) * scale_inv. Accumulation is fp32; C is f32, f16 or
// bf16, rounded once from the fp32 result (with the scales applied, the bias added and the
// GELU computed in fp32 before that rounding).
//
// Both operands are K-major — each row holds one output row's (column's) K inputs — because
// that is the only layout the FP8 tensor-core GEMMs take (cuBLASLt's "TN" requirement). So the
// options must say trans_a = false and trans_b = true, as for gemm(y, x, w, {.trans_b = true})
// of a linear layer's forward; a backward GEMM takes the transposed codes that
// ops::fp8_cast_transpose writes in the same pass as the forward's.
//
// Formats: E4M3 x E4M3, E4M3 x E5M2 and E5M2 x E4M3 (gradients are E5M2; E5M2 x E5M2 has no
// FP8 kernel and is refused).
//
// CPU: the reference — both operands dequantized to f32 (value * scale_inv), ops::gemm in f32,
// the epilogue in f32, one rounding to C's dtype. CUDA: cuBLASLt with the operands' scale_inv as
// its A/B scale pointers (read on the device: no host sync), the bias and GELU epilogues as
// ops::gemm fuses them; the same reference composition on the GPU when cuBLASLt has no FP8
// algorithm for the shape (M, N or K not a multiple of 16, or a pointer not 16-byte aligned).
// A GPU without FP8 tensor cores (compute capability below 8.9) is refused with an error, never
// emulated silently.
#pragma once

#include "stoker/core/device.h"
#include "stoker/ops/fp8.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops {

void gemm_fp8(const Tensor& c, const Fp8Tensor& a, const Fp8Tensor& b, const GemmOptions& options);

// Whether gemm_fp8 runs on `device` at all: the CPU (the reference) and CUDA GPUs of compute
// capability 8.9 or newer.
bool fp8_gemm_supported(Device device);

}  // namespace stoker::ops
