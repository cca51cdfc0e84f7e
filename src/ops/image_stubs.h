// Private: backend entry points of the image ops (ops/image.h; dispatch.h has the convention).
// CPU: src/ops/cpu/image.cpp; CUDA: kernels/image.cu.
#pragma once

#include <array>

#include "ops/dispatch.h"
#include "ops/image.h"

namespace stoker::ops {

STOKER_DECLARE_STUB(normalize_images,
                    void(const Tensor& out, const Tensor& in, const std::array<float, 3>& mean,
                         const std::array<float, 3>& std, Layout layout));

}  // namespace stoker::ops
