// Public rmsnorm_forward / rmsnorm_backward and the fused add_rmsnorm_forward /
// add_rmsnorm_backward (ops/layernorm.h): validation, then dispatch. x is [..., C] with the
// leading dimensions flattened into N rows; rstd is f32 [N], the weight and its gradient f32 [C].
#include <cmath>
#include <initializer_list>
#include <utility>

#include "ops/rmsnorm_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/layernorm.h"

namespace stoker::ops {

namespace {
int64_t leading_rows(const Tensor& x) {
  int64_t n = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) n *= x.size(d);
  return n;
}

// The normalized tensor (x, or sum for add_rmsnorm_backward): float, usable here, [N, C].
void check_x(const char* op, const char* name, const Tensor& x) {
  detail::check_float(op, name, x);
  detail::check_backend(op, x);
  STOKER_CHECK(x.rank() >= 1 && x.size(-1) > 0, "ops::", op, ": ", name, " is ", x.str(),
               "; expected [N, C] with C > 0 (normalized over the last dimension)");
}

// A tensor of x's dtype, device and element count (y, dy, dx, residual, ...).
void check_like(const char* op, const char* x_name, const Tensor& x,
                std::initializer_list<std::pair<const char*, const Tensor*>> tensors) {
  for (const auto& [name, t] : tensors) {
    detail::check_float(op, name, *t);
    detail::check_same_device(op, x_name, x, name, *t);
    detail::check_same_dtype(op, x_name, x, name, *t);
    detail::check_same_numel(op, x_name, x, name, *t);
  }
}

// An f32 vector of `len` elements on x's device.
void check_vector(const char* op, const char* name, const Tensor& t, int64_t len, const char* what,
                  const char* x_name, const Tensor& x) {
  detail::check_defined(op, name, t);
  detail::check_same_device(op, x_name, x, name, t);
  STOKER_CHECK(t.dtype() == DType::f32 && t.rank() == 1 && t.size(0) == len, "ops::", op, ": ",
               name, " is ", t.str(), " for ", x_name, " ", x.str(), "; expected f32[", len, "] (",
               what, ")");
}

void check_eps(const char* op, float eps) {
  STOKER_CHECK(eps >= 0.0f && std::isfinite(eps), "ops::", op, ": eps = ", eps,
               " must be finite and >= 0");
}

bool overlap(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data());
  const auto* pb = static_cast<const char*>(b.data());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// `out` is `in` itself (allowed when `may_alias`: in place) or disjoint from it.
void check_alias(const char* op, const char* out_name, const Tensor& out, const char* in_name,
                 const Tensor& in, bool may_alias) {
  const bool same = out.data() == in.data() && out.nbytes() == in.nbytes();
  if (may_alias && same) return;
  STOKER_CHECK(!overlap(out, in), "ops::", op, ": ", out_name, " ", out.str(), " overlaps ",
               in_name, " ", in.str(), "; ",
               may_alias ? "it may be that tensor itself (in place) or disjoint from it"
                         : "it must be a separate buffer");
}

void check_forward(const char* op, const Tensor& y, const Tensor& rstd, const Tensor& x,
                   const Tensor& weight, float eps) {
  check_x(op, "x", x);
  check_like(op, "x", x, {{"y", &y}});
  check_vector(op, "rstd", rstd, leading_rows(x), "one per row", "x", x);
  check_vector(op, "weight", weight, x.size(-1), "one per feature", "x", x);
  check_eps(op, eps);
}

void check_backward(const char* op, const char* x_name, const Tensor& x, const Tensor& rstd,
                    const Tensor& weight, const Tensor& dweight) {
  check_vector(op, "rstd", rstd, leading_rows(x), "the forward's per-row rstd", x_name, x);
  check_vector(op, "weight", weight, x.size(-1), "one per feature", x_name, x);
  check_vector(op, "dweight", dweight, x.size(-1), "one per feature, accumulated", x_name, x);
}
}  // namespace

void rmsnorm_forward(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     float eps) {
  const char* op = "rmsnorm_forward";
  check_forward(op, y, rstd, x, weight, eps);
  check_alias(op, "y", y, "x", x, true);
  if (x.numel() > 0) rmsnorm_forward_stub(x.device(), y, rstd, x, weight, eps);
}

void rmsnorm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                      const Tensor& rstd, const Tensor& weight) {
  const char* op = "rmsnorm_backward";
  check_x(op, "x", x);
  check_like(op, "x", x, {{"dx", &dx}, {"dy", &dy}});
  check_backward(op, "x", x, rstd, weight, dweight);
  check_alias(op, "dx", dx, "dy", dy, true);
  check_alias(op, "dx", dx, "x", x, false);
  if (x.numel() > 0) rmsnorm_backward_stub(x.device(), dx, dweight, dy, x, rstd, weight);
}

void add_rmsnorm_forward(const Tensor& y, const Tensor& sum, const Tensor& rstd, const Tensor& x,
                         const Tensor& residual, const Tensor& weight, float eps) {
  const char* op = "add_rmsnorm_forward";
  check_forward(op, y, rstd, x, weight, eps);
  check_like(op, "x", x, {{"residual", &residual}, {"sum", &sum}});
  check_alias(op, "sum", sum, "x", x, true);
  check_alias(op, "sum", sum, "residual", residual, true);
  check_alias(op, "y", y, "x", x, false);
  check_alias(op, "y", y, "residual", residual, false);
  check_alias(op, "y", y, "sum", sum, false);
  if (x.numel() > 0) add_rmsnorm_forward_stub(x.device(), y, sum, rstd, x, residual, weight, eps);
}

void add_rmsnorm_backward(const Tensor& dsum, const Tensor& dweight, const Tensor& dy,
                          const Tensor& dsum_in, const Tensor& sum, const Tensor& rstd,
                          const Tensor& weight) {
  const char* op = "add_rmsnorm_backward";
  check_x(op, "sum", sum);  // `sum` plays rmsnorm_backward's x
  check_like(op, "sum", sum, {{"dsum", &dsum}, {"dy", &dy}, {"dsum_in", &dsum_in}});
  check_backward(op, "sum", sum, rstd, weight, dweight);
  check_alias(op, "dsum", dsum, "dy", dy, true);
  check_alias(op, "dsum", dsum, "dsum_in", dsum_in, true);
  check_alias(op, "dsum", dsum, "sum", sum, false);
  if (sum.numel() > 0)
    add_rmsnorm_backward_stub(sum.device(), dsum, dweight, dy, dsum_in, sum, rstd, weight);
}

}  // namespace stoker::ops
