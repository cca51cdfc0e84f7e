// Private helpers for the CPU backend: typed element access and oneTBB loops.
#pragma once

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cstdint>

#include "stoker/core/dtype.h"
#include "stoker/core/error.h"
#include "stoker/core/half.h"
#include "stoker/core/tensor.h"

namespace stoker::ops::cpu {

// Elements per task: large enough that scheduling costs nothing next to the work.
constexpr int64_t kGrain = 1 << 15;

// f(begin, end) over [0, n) in parallel chunks.
template <typename F>
void parallel_range(int64_t n, F&& f, int64_t grain = kGrain) {
  if (n <= grain) {
    f(int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) { f(r.begin(), r.end()); });
}

inline float load(float v) { return v; }
inline float load(core::Half v) { return core::half_bits_to_float(v.bits); }
inline float load(core::BFloat16 v) { return core::bf16_bits_to_float(v.bits); }

template <typename T>
T store(float v);
template <>
inline float store<float>(float v) {
  return v;
}
template <>
inline core::Half store<core::Half>(float v) {
  return core::Half(v);
}
template <>
inline core::BFloat16 store<core::BFloat16>(float v) {
  return core::BFloat16(v);
}

// Calls f(T{}) with T the C++ type of float dtype t.
template <typename F>
decltype(auto) visit_float(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f(float{});
    case DType::f16:
      return f(core::Half{});
    case DType::bf16:
      return f(core::BFloat16{});
    default:
      break;
  }
  STOKER_THROW("internal: float dtype expected, got ", dtype_name(t));
}

// out[i] = f(a[i]) for tensors of one float dtype (fp32 math, one rounding; out may alias a).
template <typename F>
void map_unary(const Tensor& out, const Tensor& a, F f) {
  visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data());
    const T* x = static_cast<const T*>(a.data());
    parallel_range(out.numel(), [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) o[i] = store<T>(f(load(x[i])));
    });
  });
}

// out[i] = f(a[i], b[i]) for tensors of one float dtype (out may alias a or b).
template <typename F>
void map_binary(const Tensor& out, const Tensor& a, const Tensor& b, F f) {
  visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out.data());
    const T* x = static_cast<const T*>(a.data());
    const T* y = static_cast<const T*>(b.data());
    parallel_range(out.numel(), [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) o[i] = store<T>(f(load(x[i]), load(y[i])));
    });
  });
}

}  // namespace stoker::ops::cpu
