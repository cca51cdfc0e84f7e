// FP8 tensors (Hopper's E4M3 / E5M2 GEMMs): per-tensor scaled conversion, codes = fp8(x * scale)
// (u8) with a rank-0 f32 `scale` on x's device, the same bits on CPU and GPU, and the delayed-
// scaling recipe that picks the scale from an amax history (Transformer Engine's).
// Details: docs/mixed_precision.md#fp8.
#pragma once

#include <array>
#include <cstdint>

#include "stoker/core/device.h"
#include "stoker/core/half.h"
#include "stoker/core/tensor.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops {

using core::Fp8Format;

// A matrix in FP8 as the FP8 GEMM (ops/gemm_fp8.h) takes it: u8 codes [R, C] and the factor
// that reads them back, x ~= fp8_value(code) * scale_inv, where scale_inv = 1 / the scale the
// codes were made with (rank-0 f32 on the codes' device). Each quantized tensor carries its own
// scale_inv, so a scale that moves on (delayed scaling) never changes what earlier codes mean.
struct Fp8Tensor {
  Tensor codes;
  Tensor scale_inv;
  Fp8Format format = Fp8Format::e4m3;
};

// What fp8_cast_transpose writes; null members are skipped (scale_inv is always written).
struct Fp8CastOutputs {
  const Tensor* codes = nullptr;      // u8 [R, C]: fp8(x * scale)
  const Tensor* codes_t = nullptr;    // u8 [C, R]: the same codes, transposed
  const Tensor* scale_inv = nullptr;  // rank-0 f32: 1 / scale (correctly rounded)
  const Tensor* amax = nullptr;       // rank-0 f32: max |x| (NaN if x holds one; 0 when empty)
};

// One pass over a 2-D x [R, C] (f32/f16/bf16) for everything a linear layer's FP8 GEMMs need
// of it: the codes in x's layout (the forward's operand), the codes transposed (the backward's
// operand: the FP8 GEMM takes both operands K-major, see ops/gemm_fp8.h), the matching
// scale_inv, and x's amax for the delayed-scaling history. scale: rank-0 f32 on x's device,
// read there (no host sync). The codes are fp8_quantize's, bit for bit.
void fp8_cast_transpose(const Fp8CastOutputs& out, const Tensor& x, const Tensor& scale,
                        Fp8Format format);

// codes (u8) = fp8(x * scale) elementwise; x float (f32/f16/bf16), scale a rank-0 f32 tensor on
// x's device (read there: no host sync).
void fp8_quantize(const Tensor& codes, const Tensor& x, const Tensor& scale, Fp8Format format);
// y (float dtype) = fp8_value(codes) / scale.
void fp8_dequantize(const Tensor& y, const Tensor& codes, const Tensor& scale, Fp8Format format);
// y (float dtype, x.codes' element count) = fp8_value(x.codes) * x.scale_inv: what the FP8 GEMM
// reads (the reference of ops/gemm_fp8.h).
void fp8_dequantize(const Tensor& y, const Fp8Tensor& x);

// Delayed scaling, one step: history (f32 [L], most recent first) shifts by one and takes `amax`
// (rank-0 f32, this step's |x| maximum) at index 0; then
//   scale = fp8_max(format) / max(history) / 2^margin
// — unless max(history) is 0 or not finite, in which case scale keeps its value (a tensor of
// zeros, or an overflowed step, must not set a useless or infinite scale). All on the device.
void fp8_update_scale(const Tensor& scale, const Tensor& history, const Tensor& amax,
                      Fp8Format format, int margin = 0);

}  // namespace stoker::ops

// Block-wise 8-bit quantization with a dynamic (non-linear) map: how the 8-bit optimizer states
namespace stoker::ops {

// The sorted 256-entry table (see above) and how many of its entries quantization searches.
const std::array<float, 256>& dynamic_map(bool is_signed);
constexpr int dynamic_map_codes(bool is_signed) { return is_signed ? 255 : 256; }
// The largest distance between neighbouring searched entries of the map.
float dynamic_map_max_gap(bool is_signed);
// The code of one value already divided by its block's absmax (what quantize_blockwise and the
// 8-bit optimizer states store): the index of the nearest map entry.
uint8_t dynamic_map_encode(float x, bool is_signed);

// Scale blocks of a tensor of n values: ceil(n / block).
constexpr int64_t quantization_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

// codes (u8, x's numel) and absmax (f32, quantization_blocks(numel, block)) from x (f32), all
// on one device. block: a multiple of 256 no larger than 4096. Unsigned maps clamp negative
// values to 0.
void quantize_blockwise(const Tensor& codes, const Tensor& absmax, const Tensor& x, bool is_signed,
                        int64_t block);
// out (f32) = map[codes] * absmax of each value's block.
void dequantize_blockwise(const Tensor& out, const Tensor& codes, const Tensor& absmax,
                          bool is_signed, int64_t block);

}  // namespace stoker::ops

// FP8 GEMM (the tensor cores of Ada and Hopper): C [M, N] = alpha * A B^T + beta C (+ bias, and
namespace stoker::ops {

void gemm_fp8(const Tensor& c, const Fp8Tensor& a, const Fp8Tensor& b, const GemmOptions& options);

// Whether gemm_fp8 runs on `device` at all: the CPU (the reference) and CUDA GPUs of compute
// capability 8.9 or newer.
bool fp8_gemm_supported(Device device);

}  // namespace stoker::ops
