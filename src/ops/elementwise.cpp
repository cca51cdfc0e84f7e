#include "stoker/ops/elementwise.h"

#include "ops/elementwise_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {
void check_binary(const char* op, const Tensor& out, const Tensor& a, const Tensor& b) {
  detail::check_float_operands(op, "out", out, "a", a, "b", b);
  detail::check_same_dtype(op, "out", out, "a", a);
  detail::check_same_numel(op, "a", a, "b", b);
  detail::check_same_numel(op, "out", out, "a", a);
}
}  // namespace

void add(const Tensor& out, const Tensor& a, const Tensor& b) {
  check_binary("add", out, a, b);
  if (out.numel() > 0) add_stub(out.device(), out, a, b);
}

void mul(const Tensor& out, const Tensor& a, const Tensor& b) {
  check_binary("mul", out, a, b);
  if (out.numel() > 0) mul_stub(out.device(), out, a, b);
}

void axpy(const Tensor& y, float alpha, const Tensor& x) {
  detail::check_float("axpy", "y", y);
  detail::check_float("axpy", "x", x);
  detail::check_backend("axpy", y);
  detail::check_same_device("axpy", "y", y, "x", x);
  detail::check_same_numel("axpy", "y", y, "x", x);
  if (y.numel() > 0) axpy_stub(y.device(), y, alpha, x);
}

void scale(const Tensor& x, float alpha) {
  detail::check_float("scale", "x", x);
  detail::check_backend("scale", x);
  if (x.numel() > 0) scale_stub(x.device(), x, alpha);
}

void scale_by(const Tensor& x, const Tensor& factor) {
  detail::check_float("scale_by", "x", x);
  detail::check_backend("scale_by", x);
  STOKER_CHECK(factor.defined() && factor.dtype() == DType::f32 && factor.numel() == 1,
               "ops::scale_by: factor must be a one-element f32 tensor, got ",
               factor.defined() ? factor.str() : std::string("undefined"));
  detail::check_same_device("scale_by", "x", x, "factor", factor);
  if (x.numel() > 0) scale_by_stub(x.device(), x, factor);
}

}  // namespace stoker::ops
