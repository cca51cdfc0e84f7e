// Private: the FP8 arithmetic shared by the CPU backend (src/ops/cpu/fp8.cpp) and the CUDA
// kernels (kernels/fp8.cu): the format visitor and the scale update, one definition for both.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "stoker/core/half.h"

namespace stoker::ops {

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
