// CPU reference for fill, cast and cast_multi (conversions through core/half.h, the same code
// the CUDA kernels use, so both backends produce identical bits).
#include <algorithm>

#include "ops/copy_stubs.h"
#include "ops/cpu/parallel.h"

namespace stoker::ops::cpu {

namespace {
template <typename T>
void fill_typed(const Tensor& out, T value) {
  T* p = static_cast<T*>(out.data());
  parallel_range(out.numel(), [&](int64_t b, int64_t e) { std::fill(p + b, p + e, value); });
}
}  // namespace

void fill(const Tensor& out, double value) {
  switch (out.dtype()) {
    case DType::f32:
      return fill_typed(out, static_cast<float>(value));
    case DType::f16:
      return fill_typed(out, core::Half(static_cast<float>(value)));
    case DType::bf16:
      return fill_typed(out, core::BFloat16(static_cast<float>(value)));
    case DType::i32:
      return fill_typed(out, static_cast<int32_t>(value));
    case DType::i64:
      return fill_typed(out, static_cast<int64_t>(value));
    case DType::u8:
      return fill_typed(out, static_cast<uint8_t>(value));
  }
}

void cast(const Tensor& dst, const Tensor& src) {
  if (dst.dtype() == src.dtype()) return core::detail::copy_bytes(dst, src);
  visit_float(dst.dtype(), [&](auto d) {
    using D = decltype(d);
    visit_float(src.dtype(), [&](auto s) {
      using S = decltype(s);
      D* out = static_cast<D*>(dst.data());
      const S* in = static_cast<const S*>(src.data());
      parallel_range(dst.numel(), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) out[i] = store<D>(load(in[i]));
      });
    });
  });
}

void cast_multi(std::span<const Tensor> dsts, std::span<const Tensor> srcs) {
  for (size_t t = 0; t < dsts.size(); ++t)
    if (dsts[t].numel() > 0) cast(dsts[t], srcs[t]);
}

STOKER_REGISTER_STUB(fill, fill);
STOKER_REGISTER_STUB(cast, cast);
STOKER_REGISTER_STUB(cast_multi, cast_multi);

}  // namespace stoker::ops::cpu
