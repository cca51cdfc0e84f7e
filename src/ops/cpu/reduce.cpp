// CPU reference for sum / max_abs / l2_norm over one or many tensors. Accumulates in fp64 with
// oneTBB's deterministic reduce (fixed split points), so the value is the same on every run and
// thread count. NaN propagates (a max that drops NaN would hide an overflow).
#include <oneapi/tbb/parallel_reduce.h>

#include <cmath>
#include <limits>

#include "ops/cpu/parallel.h"
#include "ops/reduce_stubs.h"

namespace stoker::ops::cpu {

namespace {
double combine(Reduction r, double acc, double v) {
  if (r != Reduction::max_abs) return acc + v;
  if (std::isnan(acc) || std::isnan(v)) return std::numeric_limits<double>::quiet_NaN();
  return acc > v ? acc : v;
}

template <typename T>
double reduce_typed(const T* p, int64_t n, Reduction r) {
  auto body = [&](const tbb::blocked_range<int64_t>& range, double acc) {
    for (int64_t i = range.begin(); i < range.end(); ++i) {
      const double v = load(p[i]);
      switch (r) {
        case Reduction::sum:
          acc += v;
          break;
        case Reduction::l2_norm:
          acc += v * v;
          break;
        case Reduction::max_abs:
          acc = combine(r, acc, std::fabs(v));
          break;
      }
    }
    return acc;
  };
  return tbb::parallel_deterministic_reduce(tbb::blocked_range<int64_t>(0, n, kGrain), 0.0, body,
                                            [r](double a, double b) { return combine(r, a, b); });
}
}  // namespace

void reduce(std::span<const Tensor> xs, Reduction r, const Tensor& out) {
  double acc = 0.0;
  for (const Tensor& x : xs) {
    if (x.numel() == 0) continue;
    const double part = visit_float(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return reduce_typed(static_cast<const T*>(x.data()), x.numel(), r);
    });
    acc = combine(r, acc, part);
  }
  if (r == Reduction::l2_norm) acc = std::sqrt(acc);
  *static_cast<float*>(out.data()) = static_cast<float>(acc);
}

STOKER_REGISTER_STUB(reduce, reduce);

}  // namespace stoker::ops::cpu
