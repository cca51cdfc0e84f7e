// Public layernorm_forward / layernorm_backward and the fused add_layernorm_forward /
// add_layernorm_backward: validation, then dispatch. x is [..., C] with
// the leading dimensions flattened into N rows; the per-row statistics are f32 [N] and the
// affine parameters and their gradients f32 [C].
#include "stoker/ops/layernorm.h"

#include <cmath>
#include <utility>

#include "ops/layernorm_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {
int64_t leading_rows(const Tensor& x) {
  int64_t n = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) n *= x.size(d);
  return n;
}

// x_name: what the op calls the normalized tensor ("x", or "sum" for add_layernorm_backward).
void check_vector(const char* op, const char* name, const Tensor& t, int64_t len, const char* what,
                  const Tensor& x, const char* x_name = "x") {
  detail::check_defined(op, name, t);
  detail::check_same_device(op, x_name, x, name, t);
  STOKER_CHECK(t.dtype() == DType::f32 && t.rank() == 1 && t.size(0) == len, "ops::", op, ": ",
               name, " is ", t.str(), " for ", x_name, " ", x.str(), "; expected f32[", len, "] (",
               what, ")");
}

void check_like_x(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  detail::check_float(op, name, t);
  detail::check_same_device(op, "x", x, name, t);
  detail::check_same_dtype(op, "x", x, name, t);
  detail::check_same_numel(op, "x", x, name, t);
}

void check_x(const char* op, const Tensor& x, const char* x_name = "x") {
  detail::check_float(op, x_name, x);
  detail::check_backend(op, x);
  STOKER_CHECK(x.rank() >= 1, "ops::", op, ": ", x_name, " is ", x.str(),
               "; expected [N, C] (normalized over the last dimension)");
}
// Byte ranges of a and b intersect.
bool overlap(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data());
  const auto* pb = static_cast<const char*>(b.data());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// `out` is `in` itself (same first element, same size: an in-place update, allowed when
// `may_alias`) or does not overlap it.
void check_alias(const char* op, const char* out_name, const Tensor& out, const char* in_name,
                 const Tensor& in, bool may_alias) {
  const bool same = out.data() == in.data() && out.nbytes() == in.nbytes();
  if (may_alias && same) return;
  STOKER_CHECK(!overlap(out, in), "ops::", op, ": ", out_name, " ", out.str(), " overlaps ",
               in_name, " ", in.str(), "; ",
               may_alias ? "it may be that tensor itself (in place) or disjoint from it"
                         : "it must be a separate buffer");
}

// The checks layernorm_forward and add_layernorm_forward share (x and its output y, the
// per-row statistics, the per-feature affine parameters, eps), in the order both report them.
void check_forward(const char* op, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                   const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps) {
  check_x(op, x);
  const int64_t n = leading_rows(x), c = x.size(-1);
  check_like_x(op, "y", y, x);
  check_vector(op, "mean", mean, n, "one per row", x);
  check_vector(op, "rstd", rstd, n, "one per row", x);
  check_vector(op, "gamma", gamma, c, "one per feature", x);
  check_vector(op, "beta", beta, c, "one per feature", x);
  STOKER_CHECK(eps >= 0.0f && std::isfinite(eps), "ops::", op, ": eps = ", eps,
               " must be finite and >= 0");
}
}  // namespace

void layernorm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& gamma, const Tensor& beta, float eps) {
  const char* op = "layernorm_forward";
  check_forward(op, y, mean, rstd, x, gamma, beta, eps);
  if (x.numel() > 0) layernorm_forward_stub(x.device(), y, mean, rstd, x, gamma, beta, eps);
}

void layernorm_backward(const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                        const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& gamma) {
  const char* op = "layernorm_backward";
  check_x(op, x);
  const int64_t n = leading_rows(x), c = x.size(-1);
  check_like_x(op, "dx", dx, x);
  check_like_x(op, "dy", dy, x);
  check_vector(op, "mean", mean, n, "the forward's per-row mean", x);
  check_vector(op, "rstd", rstd, n, "the forward's per-row rstd", x);
  check_vector(op, "gamma", gamma, c, "one per feature", x);
  check_vector(op, "dgamma", dgamma, c, "one per feature, accumulated", x);
  check_vector(op, "dbeta", dbeta, c, "one per feature, accumulated", x);
  if (x.numel() > 0)
    layernorm_backward_stub(x.device(), dx, dgamma, dbeta, dy, x, mean, rstd, gamma);
}

void add_layernorm_forward(const Tensor& y, const Tensor& sum, const Tensor& mean,
                           const Tensor& rstd, const Tensor& x, const Tensor& residual,
                           const Tensor& gamma, const Tensor& beta, float eps) {
  const char* op = "add_layernorm_forward";
  check_forward(op, y, mean, rstd, x, gamma, beta, eps);
  check_like_x(op, "residual", residual, x);
  check_like_x(op, "sum", sum, x);
  check_alias(op, "sum", sum, "x", x, true);
  check_alias(op, "sum", sum, "residual", residual, true);
  check_alias(op, "y", y, "x", x, false);
  check_alias(op, "y", y, "residual", residual, false);
  check_alias(op, "y", y, "sum", sum, false);
  if (x.numel() > 0)
    add_layernorm_forward_stub(x.device(), y, sum, mean, rstd, x, residual, gamma, beta, eps);
}

void add_layernorm_backward(const Tensor& dsum, const Tensor& dgamma, const Tensor& dbeta,
                            const Tensor& dy, const Tensor& dsum_in, const Tensor& sum,
                            const Tensor& mean, const Tensor& rstd, const Tensor& gamma) {
  const char* op = "add_layernorm_backward";
  check_x(op, sum, "sum");  // `sum` plays layernorm_backward's x
  const int64_t n = leading_rows(sum), c = sum.size(-1);
  for (const auto& [name, t] :
       {std::pair<const char*, const Tensor&>{"dsum", dsum}, {"dy", dy}, {"dsum_in", dsum_in}}) {
    detail::check_float(op, name, t);
    detail::check_same_device(op, "sum", sum, name, t);
    detail::check_same_dtype(op, "sum", sum, name, t);
    detail::check_same_numel(op, "sum", sum, name, t);
  }
  check_vector(op, "mean", mean, n, "the forward's per-row mean", sum, "sum");
  check_vector(op, "rstd", rstd, n, "the forward's per-row rstd", sum, "sum");
  check_vector(op, "gamma", gamma, c, "one per feature", sum, "sum");
  check_vector(op, "dgamma", dgamma, c, "one per feature, accumulated", sum, "sum");
  check_vector(op, "dbeta", dbeta, c, "one per feature, accumulated", sum, "sum");
  check_alias(op, "dsum", dsum, "dy", dy, true);
  check_alias(op, "dsum", dsum, "dsum_in", dsum_in, true);
  check_alias(op, "dsum", dsum, "sum", sum, false);
  if (sum.numel() > 0)
    add_layernorm_backward_stub(sum.device(), dsum, dgamma, dbeta, dy, dsum_in, sum, mean, rstd,
                                gamma);
}

}  // namespace stoker::ops
