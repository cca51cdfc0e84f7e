// Private: backend entry points of the image ops (see backend.h for the convention).
#pragma once

#include <array>

#include "ops/backend.h"
#include "stoker/ops/image.h"

namespace stoker::ops {

#define STOKER_IMAGE_OPS_DECLS                                                                 \
  void normalize_images(const Tensor& out, const Tensor& in, const std::array<float, 3>& mean, \
                        const std::array<float, 3>& std, Layout layout);

namespace cpu {
STOKER_IMAGE_OPS_DECLS
}
namespace cuda {
STOKER_IMAGE_OPS_DECLS
}
#undef STOKER_IMAGE_OPS_DECLS

}  // namespace stoker::ops
