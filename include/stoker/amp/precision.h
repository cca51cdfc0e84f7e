// Precision: the arithmetic a training run uses (docs/architecture.md#mixed-precision).
//   fp32  everything in f32 (GEMMs exact fp32 unless ops::set_allow_tf32(true))
//   bf16  activations and GEMM inputs in bf16, fp32 accumulation and master weights; no loss
//         scaling needed (bf16 has fp32's exponent range)
//   fp16  as bf16 with f16, plus dynamic loss scaling (GradScaler) against gradient underflow
// Norms, softmax, losses and reductions compute in fp32 under all three.
#pragma once

#include <string_view>

#include "stoker/core/dtype.h"

namespace stoker::amp {

enum class Precision { fp32, bf16, fp16 };

constexpr DType compute_dtype(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
}

constexpr std::string_view precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::fp16 ? "fp16" : "fp32";
}

// The Precision named `name` ("fp32", "bf16" or "fp16", as precision_name spells them); any
// other word throws stoker::Error naming `flag` and the valid values:
// "--precision: 'fp8' is not fp32, bf16 or fp16".
Precision parse_precision(std::string_view name, std::string_view flag = "--precision");

}  // namespace stoker::amp
