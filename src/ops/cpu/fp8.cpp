// CPU reference of the FP8 ops: core/fp8.h's conversions element by element (oneTBB-parallel),
// the scale read on the host.
#include <algorithm>
#include <atomic>

#include "ops/cpu/parallel.h"
#include "ops/fp8_math.h"
#include "ops/fp8_stubs.h"

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

void fp8_dequantize(const Tensor& y, const Tensor& codes, const Tensor& factor,
                    core::Fp8Format format, bool factor_is_inverse) {
  const float s = *static_cast<const float*>(factor.data());
  const uint8_t* in = static_cast<const uint8_t*>(codes.data());
  visit_fp8_format(format, [&](auto fmt) {
    constexpr core::Fp8Format F = decltype(fmt)::value;
    visit_float(y.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* out = static_cast<T*>(y.data());
      parallel_range(y.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const float v = core::fp8_bits_to_float<F>(in[i]);
          out[i] = store<T>(factor_is_inverse ? v * s : v / s);
        }
      });
    });
  });
}

void fp8_cast_transpose(const Fp8CastOutputs& out, const Tensor& x, const Tensor& scale,
                        core::Fp8Format format) {
  const float s = *static_cast<const float*>(scale.data());
  *static_cast<float*>(out.scale_inv->data()) = 1.0f / s;
  const int64_t rows = x.size(0), cols = x.size(1);
  uint8_t* codes = out.codes ? static_cast<uint8_t*>(out.codes->data()) : nullptr;
  uint8_t* codes_t = out.codes_t ? static_cast<uint8_t*>(out.codes_t->data()) : nullptr;
  // amax as the largest bit pattern of |x|: for non-negative floats the order of the bits is
  // the order of the values, with NaN above infinity above every finite value (NaN wins).
  std::atomic<uint32_t> amax_bits{0};
  visit_fp8_format(format, [&](auto fmt) {
    constexpr core::Fp8Format F = decltype(fmt)::value;
    visit_float(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* in = static_cast<const T*>(x.data());
      parallel_range(rows, [&](int64_t b, int64_t e) {
        uint32_t local = 0;
        for (int64_t r = b; r < e; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            const float v = load(in[r * cols + c]);
            local = std::max(local, core::float_bits(v) & 0x7fffffffu);
            const uint8_t q = core::float_to_fp8_bits<F>(v * s);
            if (codes) codes[r * cols + c] = q;
            if (codes_t) codes_t[c * rows + r] = q;
          }
        }
        uint32_t seen = amax_bits.load();
        while (local > seen && !amax_bits.compare_exchange_weak(seen, local)) {
        }
      });
    });
  });
  if (out.amax) *static_cast<float*>(out.amax->data()) = core::bits_float(amax_bits.load());
}

void fp8_update_scale(const Tensor& scale, const Tensor& history, const Tensor& amax,
                      core::Fp8Format format, int margin) {
  detail::fp8_scale_step(static_cast<float*>(scale.data()), static_cast<float*>(history.data()),
                         history.numel(), *static_cast<const float*>(amax.data()),
                         core::fp8_max(format), margin);
}

STOKER_REGISTER_STUB(fp8_quantize, fp8_quantize);
STOKER_REGISTER_STUB(fp8_dequantize, fp8_dequantize);
STOKER_REGISTER_STUB(fp8_cast_transpose, fp8_cast_transpose);
STOKER_REGISTER_STUB(fp8_update_scale, fp8_update_scale);

}  // namespace stoker::ops::cpu
