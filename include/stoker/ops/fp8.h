// FP8 tensors for FP8 training (Hopper's E4M3 / E5M2 GEMMs): per-tensor scaled conversion and
// the delayed-scaling recipe that chooses the scale. Conversions are core/fp8.h's (round to
// nearest even, saturating), the same bits on the CPU and the GPU.
//
// A tensor x is stored as codes = fp8(x * scale) (u8, one per element) with a rank-0 f32
// `scale` on x's device, and read back as fp8_value(codes) / scale. Delayed scaling (as NVIDIA's
// Transformer Engine does it): the scale used at step t comes from the absolute maxima (amax)
// of the same tensor over the previous steps, kept in a history; no pass over x is needed
// before it is converted, and the amax of this step (ops::max_abs, or the GEMM's own output)
// joins the history for the next.
#pragma once

#include "stoker/core/fp8.h"
#include "stoker/core/tensor.h"

namespace stoker::ops {

using core::Fp8Format;

// codes (u8) = fp8(x * scale) elementwise; x float (f32/f16/bf16), scale a rank-0 f32 tensor on
// x's device (read there: no host sync).
void fp8_quantize(const Tensor& codes, const Tensor& x, const Tensor& scale, Fp8Format format);
// y (float dtype) = fp8_value(codes) / scale.
void fp8_dequantize(const Tensor& y, const Tensor& codes, const Tensor& scale, Fp8Format format);

// Delayed scaling, one step: history (f32 [L], most recent first) shifts by one and takes `amax`
// (rank-0 f32, this step's |x| maximum) at index 0; then
//   scale = fp8_max(format) / max(history) / 2^margin
// — unless max(history) is 0 or not finite, in which case scale keeps its value (a tensor of
// zeros, or an overflowed step, must not set a useless or infinite scale). All on the device.
void fp8_update_scale(const Tensor& scale, const Tensor& history, const Tensor& amax,
                      Fp8Format format, int margin = 0);

}  // namespace stoker::ops
