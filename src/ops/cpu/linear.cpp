// CPU reference for add_bias and bias_grad.
// add_bias is one fp32 add per element, rounded once: the same bits as the CUDA kernel.
// bias_grad splits the work by COLUMN blocks: each task sums its columns over all rows in row
// order (fp64 accumulators, rounded once), so no two tasks touch one output and the result does
// not depend on the thread count. Rows are walked in the inner loop over a contiguous column
// block, which keeps the access row-major (streaming) rather than strided.
#include <algorithm>
#include <vector>

#include "ops/cpu/parallel.h"
#include "ops/linear_stubs.h"

namespace stoker::ops::cpu {

void add_bias(const Tensor& y, const Tensor& bias) {
  const int64_t c = bias.numel();
  const int64_t n = y.numel() / c;
  const float* b = static_cast<const float*>(bias.data());
  visit_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(y.data());
    parallel_range(
        n,
        [&](int64_t rs, int64_t re) {
          for (int64_t r = rs; r < re; ++r) {
            T* row = p + r * c;
            for (int64_t j = 0; j < c; ++j) row[j] = store<T>(load(row[j]) + b[j]);
          }
        },
        std::max<int64_t>(1, kGrain / c));
  });
}

void bias_grad(const Tensor& dbias, const Tensor& dy) {
  const int64_t c = dbias.numel();
  const int64_t n = dy.numel() / c;
  float* out = static_cast<float*>(dbias.data());
  constexpr int64_t kBlock = 64;  // columns per task step: a few cache lines per row
  visit_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(dy.data());
    const int64_t blocks = (c + kBlock - 1) / kBlock;
    parallel_range(
        blocks,
        [&](int64_t bs, int64_t be) {
          double acc[kBlock];
          for (int64_t blk = bs; blk < be; ++blk) {
            const int64_t j0 = blk * kBlock;
            const int64_t w = std::min(kBlock, c - j0);
            std::fill(acc, acc + w, 0.0);
            for (int64_t r = 0; r < n; ++r) {
              const T* row = g + r * c + j0;
              for (int64_t j = 0; j < w; ++j) acc[j] += load(row[j]);
            }
            for (int64_t j = 0; j < w; ++j) out[j0 + j] = static_cast<float>(out[j0 + j] + acc[j]);
          }
        },
        std::max<int64_t>(1, kGrain / std::max<int64_t>(1, n * kBlock)));
  });
}

STOKER_REGISTER_STUB(add_bias, add_bias);
STOKER_REGISTER_STUB(bias_grad, bias_grad);

}  // namespace stoker::ops::cpu
