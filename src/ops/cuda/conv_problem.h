// Private: the key of one convolution problem on one device — what cuDNN's plans for it depend
// on: dtype, layout and every extent and parameter of the geometry. The convolution plans
// (conv_cudnn.cpp) add their math mode and algorithm search to it; the fused statistics graphs
// (conv_stats_cudnn.cpp) key on it as is.
#pragma once

#include <compare>
#include <cstdint>

#include "ops/geometry.h"
#include "stoker/core/dtype.h"

namespace stoker::ops::cuda {

struct ConvProblem {
  int device = 0, dtype = 0, layout = 0;
  int64_t n = 0, c = 0, h = 0, w = 0, k = 0, r = 0, s = 0;
  int64_t sh = 0, sw = 0, ph = 0, pw = 0, dh = 0, dw = 0, groups = 0;

  static ConvProblem of(int device, DType t, const detail::ConvGeometry& g) {
    return {device,
            static_cast<int>(t),
            static_cast<int>(g.layout),
            g.n,
            g.c,
            g.h,
            g.w,
            g.k,
            g.r,
            g.s,
            g.sh,
            g.sw,
            g.ph,
            g.pw,
            g.dh,
            g.dw,
            g.groups};
  }
  auto operator<=>(const ConvProblem&) const = default;
};

}  // namespace stoker::ops::cuda
