// CPU batched GEMM: one cblas_sgemm per matrix, the matrices spread over oneTBB threads (the
// attention products are many small GEMMs, which BLAS would run one thread each anyway). Half
// inputs are widened to fp32 once for the whole batch and a half output is rounded once at the
// end, as ops::gemm does, so each matrix equals an ops::gemm of the same operands.
#include <cblas.h>

#include "ops/attention_stubs.h"
#include "ops/copy_stubs.h"
#include "ops/cpu/f32.h"
#include "ops/cpu/parallel.h"

namespace stoker::ops::cpu {

void gemm_batched(const Tensor& c, const Tensor& a, const Tensor& b, int64_t batch,
                  const GemmOptions& o) {
  const int m = static_cast<int>(c.size(-2));
  const int n = static_cast<int>(c.size(-1));
  const int k = static_cast<int>(o.trans_a ? a.size(-2) : a.size(-1));
  const int lda = static_cast<int>(a.size(-1)), ldb = static_cast<int>(b.size(-1));
  const int64_t sa = a.numel() / batch, sb = b.numel() / batch, sc = int64_t{m} * n;
  const Tensor a32 = as_f32(a);
  const Tensor b32 = as_f32(b);
  const Tensor c32 = f32_accumulator(c, o.beta);
  const float* pa = static_cast<const float*>(a32.data());
  const float* pb = static_cast<const float*>(b32.data());
  float* pc = static_cast<float*>(c32.data());
  // About 64 K multiply-adds per task at least, so tiny products are not one task each.
  const int64_t work = std::max<int64_t>(1, int64_t{m} * n * k);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / work);
  parallel_range(
      batch,
      [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
          cblas_sgemm(CblasRowMajor, o.trans_a ? CblasTrans : CblasNoTrans,
                      o.trans_b ? CblasTrans : CblasNoTrans, m, n, k, o.alpha, pa + i * sa, lda,
                      pb + i * sb, ldb, o.beta, pc + i * sc, n);
      },
      grain);
  if (!c32.same_storage(c)) cast_impl(c, c32);
}

STOKER_REGISTER_STUB(gemm_batched, gemm_batched);

}  // namespace stoker::ops::cpu
