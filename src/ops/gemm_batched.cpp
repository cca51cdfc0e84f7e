// Public ops::gemm_batched: validation, then dispatch. The batch is every dimension before the
// last two, and must be the same for a, b and c (no broadcasting).
#include <algorithm>
#include <string>

#include "ops/attention_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/layout.h"

namespace stoker::ops {

namespace {
std::string leading(const Tensor& t) {
  std::string s = "[";
  for (int d = 0; d + 2 < t.rank(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}
}  // namespace

void gemm_batched(const Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& o) {
  const char* op = "gemm_batched";
  detail::check_float(op, "a", a);
  detail::check_float(op, "b", b);
  detail::check_float(op, "c", c);
  detail::check_backend(op, c);
  detail::check_same_device(op, "c", c, "a", a);
  detail::check_same_device(op, "c", c, "b", b);
  detail::check_same_dtype(op, "a", a, "b", b);
  STOKER_CHECK(a.rank() >= 3 && b.rank() == a.rank() && c.rank() == a.rank(),
               "ops::gemm_batched: needs a, b, c of one rank >= 3 ([batch..., rows, cols]), got a ",
               a.str(), ", b ", b.str(), ", c ", c.str(), " (use ops::gemm for single matrices)");
  for (int d = 0; d + 2 < a.rank(); ++d)
    STOKER_CHECK(a.size(d) == b.size(d) && a.size(d) == c.size(d),
                 "ops::gemm_batched: batch dimensions differ: a ", a.str(), ", b ", b.str(), ", c ",
                 c.str(), " (leading dims ", leading(a), ", ", leading(b), ", ", leading(c),
                 "; no broadcasting)");
  STOKER_CHECK(o.bias == nullptr,
               "ops::gemm_batched: options.bias is not supported; add it with ops::add_bias");
  STOKER_CHECK(o.epilogue == GemmEpilogue::none && o.aux == nullptr,
               "ops::gemm_batched: options.epilogue/options.aux are not supported (the gelu and "
               "dgelu epilogues are ops::gemm's); apply ops::gelu_forward/gelu_backward after it");
  STOKER_CHECK(o.bias_grad == nullptr,
               "ops::gemm_batched: options.bias_grad is not supported (it is ops::gemm's); "
               "compute the bias gradient with ops::bias_grad");
  STOKER_CHECK(
      c.dtype() == DType::f32 || c.dtype() == a.dtype(), "ops::gemm_batched: c is ", c.str(),
      " but a/b are ", dtype_name(a.dtype()), "; expected c in f32",
      a.dtype() == DType::f32 ? "" : std::string(" or ") + std::string(dtype_name(a.dtype())));
  const int64_t m = o.trans_a ? a.size(-1) : a.size(-2);
  const int64_t k = o.trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = o.trans_b ? b.size(-1) : b.size(-2);
  const int64_t n = o.trans_b ? b.size(-2) : b.size(-1);
  STOKER_CHECK(k == kb, "ops::gemm_batched: inner dimensions differ: op(a) is [", m, ", ", k,
               "] (a ", a.str(), o.trans_a ? ", transposed" : "", ") but op(b) is [", kb, ", ", n,
               "] (b ", b.str(), o.trans_b ? ", transposed" : "", ")");
  STOKER_CHECK(c.size(-2) == m && c.size(-1) == n, "ops::gemm_batched: c is ", c.str(),
               "; expected [..., ", m, ", ", n, "] for op(a) [..., ", m, ", ", k,
               "] x op(b) [..., ", k, ", ", n, "]");
  const int64_t batch = c.numel() / std::max<int64_t>(1, m * n);
  if (m == 0 || n == 0 || c.numel() == 0) return;
  if (k == 0) {  // all products are zero: C = beta * C, and beta = 0 must not read C
    if (o.beta == 0.0f) return fill(c, 0.0);
    return scale(c, o.beta);
  }
  gemm_batched_stub(c.device(), c, a, b, batch, o);
}

}  // namespace stoker::ops
