// CPU reference for SwiGLU (ops/activation.h): the per-element math of ops/swiglu_math.h, which
// the CUDA kernels run too, so both backends give the same bits. Parallel over rows; an element
// of the backward reads its gate and up values before writing their gradients, so dx may be x.
#include <algorithm>

#include "ops/cpu/parallel.h"
#include "ops/swiglu_math.h"
#include "ops/swiglu_stubs.h"

namespace stoker::ops::cpu {

namespace {
template <typename T>
struct RoundTo {
  float operator()(float v) const { return load(store<T>(v)); }
};

int64_t row_grain(int64_t f) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, f)); }
}  // namespace

void swiglu_forward(const Tensor& y, const Tensor& x) {
  const int64_t f = y.size(-1), n = y.numel() / f;
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    T* py = static_cast<T*>(y.data());
    parallel_range(
        n,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const T* gate = px + r * 2 * f;
            const T* up = gate + f;
            T* yr = py + r * f;
            for (int64_t j = 0; j < f; ++j)
              yr[j] = store<T>(detail::swiglu(load(gate[j]), load(up[j]), RoundTo<T>{}));
          }
        },
        row_grain(f));
  });
}

void swiglu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) {
  const int64_t f = dy.size(-1), n = dy.numel() / f;
  visit_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = static_cast<const T*>(x.data());
    const T* pdy = static_cast<const T*>(dy.data());
    T* pdx = static_cast<T*>(dx.data());
    parallel_range(
        n,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const T* gate = px + r * 2 * f;
            const T* up = gate + f;
            const T* g = pdy + r * f;
            T* dgate = pdx + r * 2 * f;
            T* dup = dgate + f;
            for (int64_t j = 0; j < f; ++j) {
              float dg, du;
              detail::swiglu_grad(load(g[j]), load(gate[j]), load(up[j]), RoundTo<T>{}, &dg, &du);
              dgate[j] = store<T>(dg);
              dup[j] = store<T>(du);
            }
          }
        },
        row_grain(f));
  });
}

STOKER_REGISTER_STUB(swiglu_forward, swiglu_forward);
STOKER_REGISTER_STUB(swiglu_backward, swiglu_backward);

}  // namespace stoker::ops::cpu
