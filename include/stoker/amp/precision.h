// Precision: the arithmetic a training run uses (docs/architecture.md#mixed-precision).
//   fp32  everything in f32 (GEMMs exact fp32 unless ops::set_allow_tf32(true))
//   bf16  activations and GEMM inputs in bf16, fp32 accumulation and master weights; no loss
//         scaling needed (bf16 has fp32's exponent range)
//   fp16  as bf16 with f16, plus dynamic loss scaling (GradScaler) against gradient underflow
//   fp8   as bf16, with every nn::Linear's GEMMs on FP8 tensor cores (E4M3 inputs and weights,
//         E5M2 gradients, delayed per-tensor scaling: nn/linear.h, nn/fp8_scaling.h); needs a
//         GPU of compute capability 8.9+ (Ada, Hopper) — refused elsewhere except on the CPU,
//         where it runs the FP8 reference arithmetic (slow; for tests)
// Norms, softmax, losses and reductions compute in fp32 under all of them.
#pragma once

#include <string_view>

#include "stoker/core/dtype.h"

namespace stoker::amp {

enum class Precision { fp32, bf16, fp16, fp8 };

constexpr DType compute_dtype(Precision p) {
  return p == Precision::bf16 || p == Precision::fp8 ? DType::bf16
         : p == Precision::fp16                      ? DType::f16
                                                     : DType::f32;
}

constexpr std::string_view precision_name(Precision p) {
  return p == Precision::bf16   ? "bf16"
         : p == Precision::fp16 ? "fp16"
         : p == Precision::fp8  ? "fp8"
                                : "fp32";
}

// The Precision named `name` ("fp32", "bf16", "fp16" or "fp8", as precision_name spells them);
// any other word throws stoker::Error naming `flag` and the valid values:
// "--precision: 'fp4' is not fp32, bf16, fp16 or fp8".
Precision parse_precision(std::string_view name, std::string_view flag = "--precision");

}  // namespace stoker::amp
