// Precision: the arithmetic a training run uses — fp32 (GEMMs exact unless TF32 is allowed), bf16
// (bf16 activations and GEMM inputs, fp32 accumulation and master weights), fp16 (as bf16, plus
// the GradScaler's dynamic loss scaling) or fp8 (as bf16, every nn::Linear's GEMMs on FP8 tensor
// cores; compute capability 8.9+, or the CPU's reference) — and the device-resident GradScaler.
// Norms, softmax, losses and reductions compute in fp32 under all of them.
// Details: docs/mixed_precision.md#mixed-precision.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/core/dtype.h"
#include "stoker/core/tensor.h"
#include "stoker/ops/optim.h"

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

// GradScaler: dynamic loss scaling for fp16 training with all of its state on the device.
namespace stoker::amp {

struct GradScalerOptions {
  float init_scale = 65536.0f;  // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
  int32_t hysteresis = 1;  // 1 = PyTorch (back off at every overflow)
  float min_scale = 1.0f;  // reaching it stops training with a clear message (check())
};

class GradScaler {
 public:
  explicit GradScaler(Device device, GradScalerOptions options = {});

  // The current scale (rank-0 f32 on the device) and the overflow flag of this step.
  const Tensor& scale() const { return scale_; }
  const Tensor& found_inf() const { return found_inf_; }

  // found_inf = 0, then divides every gradient by the scale and flags any NaN/Inf.
  void unscale(std::span<const Tensor> grads);
  // Backs off or grows the scale from this step's found_inf (on the device).
  void update();

  // Host reads (each a host sync): the scale value, and the growth tracker.
  float scale_value() const;
  int32_t growth_tracker() const;
  // Throws stoker::Error when the scale reached min_scale (called at log time).
  void check() const;

  // Device state for checkpoints: "scale" (f32) and "state" (i32[3]).
  std::vector<std::pair<std::string, Tensor>> state();
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);

  const GradScalerOptions& options() const { return options_; }

 private:
  GradScalerOptions options_;
  Tensor scale_;      // f32 []
  Tensor state_;      // i32 [3]: growth tracker, hysteresis left, hit min scale
  Tensor found_inf_;  // f32 []
};

}  // namespace stoker::amp
