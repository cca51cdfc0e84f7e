// CPU GEMM through BLAS (cblas_sgemm, row-major). Half inputs are widened to fp32 first and a
// half output is rounded once at the end, matching the GPU's "fp32 accumulate, round once".
// The gelu/dgelu epilogues and the bias gradient are the unfused ops in sequence (see below).
#include <cblas.h>

#include "ops/activation_stubs.h"
#include "ops/copy_stubs.h"
#include "ops/cpu/f32.h"
#include "ops/cpu/parallel.h"
#include "ops/gemm_stubs.h"
#include "ops/linear_stubs.h"

namespace stoker::ops::cpu {

void gemm(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& o) {
  // The bias gradient is ops::bias_grad's sum over a's rows (a = dy, read transposed), into a
  // zeroed vector: the bits of the unfused backward.
  if (o.bias_grad) {
    fill_impl(*o.bias_grad, 0.0);
    bias_grad_impl(*o.bias_grad, a);
    GemmOptions plain = o;
    plain.bias_grad = nullptr;
    return gemm_impl(c, a, b, plain);
  }
  // The epilogues are the unfused composition, op for op, so the bits are the separate ops':
  // gelu: aux = gemm + bias (rounded to aux's dtype), C = gelu_forward(aux); dgelu: C = gemm
  // (rounded), then gelu_backward in place.
  if (o.epilogue != GemmEpilogue::none) {
    GemmOptions plain = o;
    plain.epilogue = GemmEpilogue::none;
    plain.aux = nullptr;
    if (o.epilogue == GemmEpilogue::gelu) {
      gemm_impl(*o.aux, a, b, plain);
      gelu_forward_impl(c, *o.aux);
    } else {
      gemm_impl(c, a, b, plain);
      gelu_backward_impl(c, c, *o.aux);
    }
    return;
  }
  const int m = static_cast<int>(c.size(0));
  const int n = static_cast<int>(c.size(1));
  const int k = static_cast<int>(o.trans_a ? a.size(0) : a.size(1));
  const Tensor a32 = as_f32(a);
  const Tensor b32 = as_f32(b);
  const Tensor c32 = f32_accumulator(c, o.beta);
  cblas_sgemm(CblasRowMajor, o.trans_a ? CblasTrans : CblasNoTrans,
              o.trans_b ? CblasTrans : CblasNoTrans, m, n, k, o.alpha,
              static_cast<const float*>(a32.data()), static_cast<int>(a.size(1)),
              static_cast<const float*>(b32.data()), static_cast<int>(b.size(1)), o.beta,
              static_cast<float*>(c32.data()), n);
  if (o.bias) {  // in fp32, before the one rounding to C's dtype (as the GPU epilogue)
    float* out = static_cast<float*>(c32.data());
    const Tensor bias32 = as_f32(*o.bias);
    const float* bias = static_cast<const float*>(bias32.data());
    parallel_range(m, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        for (int j = 0; j < n; ++j) out[r * n + j] += bias[j];
    });
  }
  if (!c32.same_storage(c)) cast_impl(c, c32);
}

STOKER_REGISTER_STUB(gemm, gemm);

}  // namespace stoker::ops::cpu
