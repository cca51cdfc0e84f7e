// Image normalization: decoded u8 HWC pixels to the network's input.
//   out = (in / 255 - mean[c]) / std[c]
// in is u8 [N, H, W, 3] (what the decoder writes); out is f32/f16/bf16 [N, 3, H, W] (NCHW) or
// [N, H, W, 3] (NHWC). fp32 math, one rounding to the output dtype. On the GPU this is the one
// kernel the loader's batches pass through after the host-to-device copy (uint8 travels: 4x
// fewer bytes than f32).
#pragma once

#include <array>

#include "stoker/core/tensor.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

void normalize_images(const Tensor& out, const Tensor& in, const std::array<float, 3>& mean,
                      const std::array<float, 3>& std, Layout layout);

}  // namespace stoker::ops
