// Private: backend entry points of block-wise quantization (ops/quantize.h; dispatch.h has the
// convention). Each backend takes the map (dynamic_map) and its encode table (quantize_math.h's
// encode_table) from is_signed; the CUDA side passes them to its kernels.
// CPU: src/ops/cpu/quantize.cpp; CUDA: kernels/quantize.cu.
#pragma once

#include <cstdint>

#include "ops/dispatch.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(quantize_blockwise, void(const Tensor& codes, const Tensor& absmax,
                                             const Tensor& x, bool is_signed, int64_t block));
STOKER_DECLARE_STUB(dequantize_blockwise,
                    void(const Tensor& out, const Tensor& codes, const Tensor& absmax,
                         bool is_signed, int64_t block));

}  // namespace stoker::ops
