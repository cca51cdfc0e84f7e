// CPU reference of the FP8 ops: core/fp8.h's conversions element by element (oneTBB-parallel),
// the scale read on the host.
#include "ops/cpu/parallel.h"
#include "ops/fp8_backend.h"

namespace stoker::ops::cpu {

void fp8_quantize(const Tensor& codes, const Tensor& x, const Tensor& scale,
                  core::Fp8Format format) {
  const float s = *static_cast<const float*>(scale.data());
  uint8_t* out = static_cast<uint8_t*>(codes.data());
  visit_fp8_format(format, [&](auto fmt) {
    constexpr core::Fp8Format F = decltype(fmt)::value;
    visit_float(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* in = static_cast<const T*>(x.data());
      parallel_range(x.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = core::float_to_fp8_bits<F>(load(in[i]) * s);
      });
    });
  });
}

void fp8_dequantize(const Tensor& y, const Tensor& codes, const Tensor& scale,
                    core::Fp8Format format) {
  const float s = *static_cast<const float*>(scale.data());
  const uint8_t* in = static_cast<const uint8_t*>(codes.data());
  visit_fp8_format(format, [&](auto fmt) {
    constexpr core::Fp8Format F = decltype(fmt)::value;
    visit_float(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* out = static_cast<T*>(y.data());
      parallel_range(y.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = store<T>(core::fp8_bits_to_float<F>(in[i]) / s);
      });
    });
  });
}

void fp8_update_scale(const Tensor& scale, const Tensor& history, const Tensor& amax,
                      core::Fp8Format format, int margin) {
  detail::fp8_scale_step(static_cast<float*>(scale.data()), static_cast<float*>(history.data()),
                         history.numel(), *static_cast<const float*>(amax.data()),
                         core::fp8_max(format), margin);
}

}  // namespace stoker::ops::cpu
