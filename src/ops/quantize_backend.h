// Private: backend entry points of block-wise quantization (see backend.h for the convention).
// `map` is dynamic_map(is_signed).data() on the host; the CUDA side passes it to its kernels.
#pragma once

#include <cstdint>

#include "stoker/core/tensor.h"

namespace stoker::ops {

#define STOKER_QUANTIZE_BACKEND_DECLS                                                     \
  void quantize_blockwise(const Tensor& codes, const Tensor& absmax, const Tensor& x,     \
                          const float* map, int map_codes, int64_t block);                \
  void dequantize_blockwise(const Tensor& out, const Tensor& codes, const Tensor& absmax, \
                            const float* map, int64_t block);

namespace cpu {
STOKER_QUANTIZE_BACKEND_DECLS
}
namespace cuda {
STOKER_QUANTIZE_BACKEND_DECLS
}
#undef STOKER_QUANTIZE_BACKEND_DECLS

}  // namespace stoker::ops
