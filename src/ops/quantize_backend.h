// Private: backend entry points of block-wise quantization (see backend.h for the convention).
// Each backend takes the map (dynamic_map) and its encode table (quantize_math.h's encode_table)
// from is_signed; the CUDA side passes them to its kernels.
#pragma once

#include <cstdint>

#include "stoker/core/tensor.h"

namespace stoker::ops {

#define STOKER_QUANTIZE_BACKEND_DECLS                                                     \
  void quantize_blockwise(const Tensor& codes, const Tensor& absmax, const Tensor& x,     \
                          bool is_signed, int64_t block);                                 \
  void dequantize_blockwise(const Tensor& out, const Tensor& codes, const Tensor& absmax, \
                            bool is_signed, int64_t block);

namespace cpu {
STOKER_QUANTIZE_BACKEND_DECLS
}
namespace cuda {
STOKER_QUANTIZE_BACKEND_DECLS
}
#undef STOKER_QUANTIZE_BACKEND_DECLS

}  // namespace stoker::ops
