// Public swiglu_forward / swiglu_backward (ops/activation.h): validation, then dispatch. x and
// dx are [..., 2F] and y and dy [..., F] with the same leading dimensions, so every backend sees
// N = numel / 2F flat rows.
#include "ops/swiglu_stubs.h"
#include "ops/validate.h"
#include "stoker/ops/activation.h"

namespace stoker::ops {

namespace {
bool overlap(const Tensor& a, const Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data());
  const auto* pb = static_cast<const char*>(b.data());
  return a.nbytes() > 0 && b.nbytes() > 0 && pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

// x [..., 2F]: float, usable here, an even last dimension.
void check_gate_up(const char* op, const char* name, const Tensor& x) {
  detail::check_float(op, name, x);
  detail::check_backend(op, x);
  STOKER_CHECK(x.rank() >= 1 && x.size(-1) % 2 == 0, "ops::", op, ": ", name, " is ", x.str(),
               "; expected [..., 2F] (the gate half, then the up half, of each row): the last "
               "dimension must be even");
}

// `t` has x's dtype and device; `halved`: x's shape with the last dimension halved, else x's.
void check_shape(const char* op, const char* x_name, const Tensor& x, const char* name,
                 const Tensor& t, bool halved) {
  detail::check_float(op, name, t);
  detail::check_same_device(op, x_name, x, name, t);
  detail::check_same_dtype(op, x_name, x, name, t);
  Shape want = x.shape();
  if (halved) want[want.rank() - 1] /= 2;
  STOKER_CHECK(t.shape() == want, "ops::", op, ": ", name, " is ", t.str(), " for ", x_name, " ",
               x.str(), "; expected ", want, halved ? " (the last dimension halved: F)" : "");
}
}  // namespace

void swiglu_forward(const Tensor& y, const Tensor& x) {
  const char* op = "swiglu_forward";
  check_gate_up(op, "x", x);
  check_shape(op, "x", x, "y", y, true);
  STOKER_CHECK(!overlap(y, x), "ops::", op, ": y ", y.str(), " overlaps x ", x.str(),
               "; it must be a separate buffer");
  if (y.numel() > 0) swiglu_forward_stub(x.device(), y, x);
}

void swiglu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) {
  const char* op = "swiglu_backward";
  check_gate_up(op, "x", x);
  check_shape(op, "x", x, "dx", dx, false);
  check_shape(op, "x", x, "dy", dy, true);
  const bool dx_is_x = dx.data() == x.data() && dx.nbytes() == x.nbytes();
  STOKER_CHECK(dx_is_x || !overlap(dx, x), "ops::", op, ": dx ", dx.str(), " overlaps x ", x.str(),
               "; it may be x itself (in place) or disjoint from it");
  STOKER_CHECK(!overlap(dx, dy), "ops::", op, ": dx ", dx.str(), " overlaps dy ", dy.str(),
               "; it must be a separate buffer");
  if (dy.numel() > 0) swiglu_backward_stub(x.device(), dx, dy, x);
}

}  // namespace stoker::ops
