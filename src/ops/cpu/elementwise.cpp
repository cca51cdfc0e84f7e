// CPU reference for add, mul, axpy, scale: fp32 math, one rounding to the output dtype.
// axpy is fmaf(alpha, x, y), as on the GPU, so the backends agree to the bit.
#include <cmath>

#include "ops/cpu/parallel.h"
#include "ops/elementwise_stubs.h"

namespace stoker::ops::cpu {

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  map_binary(out, a, b, [](float x, float y) { return x + y; });
}

void mul(const Tensor& out, const Tensor& a, const Tensor& b) {
  map_binary(out, a, b, [](float x, float y) { return x * y; });
}

void axpy(const Tensor& y, float alpha, const Tensor& x) {
  visit_float(y.dtype(), [&](auto ytag) {
    using Y = decltype(ytag);
    visit_float(x.dtype(), [&](auto xtag) {
      using X = decltype(xtag);
      Y* py = static_cast<Y*>(y.data());
      const X* px = static_cast<const X*>(x.data());
      parallel_range(y.numel(), [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i)
          py[i] = store<Y>(std::fmaf(alpha, load(px[i]), load(py[i])));
      });
    });
  });
}

void scale(const Tensor& x, float alpha) {
  map_unary(x, x, [alpha](float v) { return v * alpha; });
}

void scale_by(const Tensor& x, const Tensor& factor) {
  scale(x, *static_cast<const float*>(factor.data()));
}

STOKER_REGISTER_STUB(add, add);
STOKER_REGISTER_STUB(mul, mul);
STOKER_REGISTER_STUB(axpy, axpy);
STOKER_REGISTER_STUB(scale, scale);
STOKER_REGISTER_STUB(scale_by, scale_by);

}  // namespace stoker::ops::cpu
