// Private: backend entry points of the FP8 ops (ops/fp8.h; see backend.h for the convention).
#pragma once

#include <type_traits>

#include "stoker/core/fp8.h"
#include "stoker/core/tensor.h"
#include "stoker/ops/fp8.h"
#include "stoker/ops/gemm.h"

namespace stoker::ops {

#define STOKER_FP8_BACKEND_DECLS                                                           \
  void fp8_quantize(const Tensor& codes, const Tensor& x, const Tensor& scale,             \
                    core::Fp8Format format);                                               \
  /* factor_is_inverse: y = value * factor (a scale_inv), else y = value / factor */       \
  void fp8_dequantize(const Tensor& y, const Tensor& codes, const Tensor& factor,          \
                      core::Fp8Format format, bool factor_is_inverse);                     \
  void fp8_cast_transpose(const Fp8CastOutputs& out, const Tensor& x, const Tensor& scale, \
                          core::Fp8Format format);                                         \
  void fp8_update_scale(const Tensor& scale, const Tensor& history, const Tensor& amax,    \
                        core::Fp8Format format, int margin);

namespace cpu {
STOKER_FP8_BACKEND_DECLS
}
namespace cuda {
STOKER_FP8_BACKEND_DECLS
// ops::gemm_fp8 through cuBLASLt; false (nothing done) where it has no FP8 algorithm for the
// call: the caller runs the reference composition (src/ops/gemm_fp8.cpp).
bool gemm_fp8(const Tensor& c, const Fp8Tensor& a, const Fp8Tensor& b, const GemmOptions& o);
}  // namespace cuda
#undef STOKER_FP8_BACKEND_DECLS

// Calls f(std::integral_constant<Fp8Format, F>{}) for the runtime format (both backends).
template <typename Fn>
void visit_fp8_format(core::Fp8Format format, Fn&& f) {
  if (format == core::Fp8Format::e4m3)
    f(std::integral_constant<core::Fp8Format, core::Fp8Format::e4m3>{});
  else
    f(std::integral_constant<core::Fp8Format, core::Fp8Format::e5m2>{});
}

// The shared arithmetic of fp8_update_scale (host and device): history shifted, amax in front,
// the new scale or the old one.
namespace detail {
STOKER_HD STOKER_FORCEINLINE void fp8_scale_step(float* scale, float* history, int64_t length,
                                                 float amax, float fp8_max, int margin) {
  for (int64_t i = length - 1; i > 0; --i) history[i] = history[i - 1];
  history[0] = amax;
  float m = 0.0f;
  for (int64_t i = 0; i < length; ++i)
    m = history[i] > m || history[i] != history[i] ? history[i] : m;  // NaN wins
  if (m > 0.0f && m - m == 0.0f) *scale = ldexpf(fp8_max / m, -margin);
}
}  // namespace detail

}  // namespace stoker::ops
