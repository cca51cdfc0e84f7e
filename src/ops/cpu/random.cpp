// CPU reference for the Philox fills: element i is philox_*(seed, offset, i) from core/rng.h,
// the same function the CUDA kernels call, so both backends give identical bits.
#include "ops/cpu/parallel.h"
#include "ops/random_stubs.h"
#include "stoker/core/rng.h"

namespace stoker::ops::cpu {

namespace {
template <typename F>
void generate(const Tensor& out, F value_of) {
  visit_float(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(out.data());
    parallel_range(out.numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = store<T>(value_of(static_cast<uint64_t>(i)));
    });
  });
}
}  // namespace

void random_uniform(const Tensor& out, float lo, float hi, uint64_t seed, uint64_t offset) {
  generate(out, [&](uint64_t i) { return core::philox_uniform(seed, offset, i, lo, hi); });
}

void random_normal(const Tensor& out, float mean, float std, uint64_t seed, uint64_t offset) {
  generate(out, [&](uint64_t i) { return core::philox_normal(seed, offset, i, mean, std); });
}

STOKER_REGISTER_STUB(random_uniform, random_uniform);
STOKER_REGISTER_STUB(random_normal, random_normal);

}  // namespace stoker::ops::cpu
