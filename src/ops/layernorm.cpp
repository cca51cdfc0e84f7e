// Public layernorm_forward / layernorm_backward: validation, then dispatch. x is [..., C] with
// the leading dimensions flattened into N rows; the per-row statistics are f32 [N] and the
// affine parameters and their gradients f32 [C].
#include "stoker/ops/layernorm.h"

#include <cmath>

#include "ops/backend.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {
int64_t leading_rows(const Tensor& x) {
  int64_t n = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) n *= x.size(d);
  return n;
}

void check_vector(const char* op, const char* name, const Tensor& t, int64_t len, const char* what,
                  const Tensor& x) {
  detail::check_defined(op, name, t);
  detail::check_same_device(op, "x", x, name, t);
  STOKER_CHECK(t.dtype() == DType::f32 && t.rank() == 1 && t.size(0) == len, "ops::", op, ": ",
               name, " is ", t.str(), " for x ", x.str(), "; expected f32[", len, "] (", what, ")");
}

void check_like_x(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  detail::check_float(op, name, t);
  detail::check_same_device(op, "x", x, name, t);
  detail::check_same_dtype(op, "x", x, name, t);
  detail::check_same_numel(op, "x", x, name, t);
}

void check_x(const char* op, const Tensor& x) {
  detail::check_float(op, "x", x);
  detail::check_backend(op, x);
  STOKER_CHECK(x.rank() >= 1, "ops::", op, ": x is ", x.str(),
               "; expected [N, C] (normalized over the last dimension)");
}
}  // namespace

void layernorm_forward(const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& gamma, const Tensor& beta, float eps) {
  const char* op = "layernorm_forward";
  check_x(op, x);
  const int64_t n = leading_rows(x), c = x.size(-1);
  check_like_x(op, "y", y, x);
  check_vector(op, "mean", mean, n, "one per row", x);
  check_vector(op, "rstd", rstd, n, "one per row", x);
  check_vector(op, "gamma", gamma, c, "one per feature", x);
  check_vector(op, "beta", beta, c, "one per feature", x);
  STOKER_CHECK(eps >= 0.0f && std::isfinite(eps), "ops::", op, ": eps = ", eps,
               " must be finite and >= 0");
  if (x.numel() > 0)
    STOKER_DISPATCH(x.device(), layernorm_forward, y, mean, rstd, x, gamma, beta, eps);
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
    STOKER_DISPATCH(x.device(), layernorm_backward, dx, dgamma, dbeta, dy, x, mean, rstd, gamma);
}

}  // namespace stoker::ops
