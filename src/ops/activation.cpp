// Public ReLU, GELU and dropout: validation, then dispatch to the device's backend. All tensors
// of one call share a float dtype, a device and an element count (shapes may differ, as for a
// reshape), so every backend can treat them as flat arrays.
#include "stoker/ops/activation.h"

#include <cmath>

#include "ops/activation_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {
// out = f(a[, b]): float, same dtype, same device, same element count.
void check_elementwise(const char* op, const char* out_name, const Tensor& out, const char* a_name,
                       const Tensor& a, const char* b_name = nullptr, const Tensor* b = nullptr) {
  detail::check_float(op, out_name, out);
  detail::check_float(op, a_name, a);
  detail::check_backend(op, out);
  detail::check_same_device(op, out_name, out, a_name, a);
  detail::check_same_dtype(op, out_name, out, a_name, a);
  detail::check_same_numel(op, out_name, out, a_name, a);
  if (b != nullptr) {
    detail::check_float(op, b_name, *b);
    detail::check_same_device(op, out_name, out, b_name, *b);
    detail::check_same_dtype(op, out_name, out, b_name, *b);
    detail::check_same_numel(op, out_name, out, b_name, *b);
  }
}

void check_dropout_p(const char* op, float p) {
  STOKER_CHECK(p >= 0.0f && p < 1.0f, "ops::", op, ": p = ", p,
               " is outside [0, 1) (p is the probability of dropping an element)");
}
}  // namespace

void relu_forward(const Tensor& y, const Tensor& x) {
  check_elementwise("relu_forward", "y", y, "x", x);
  if (y.numel() > 0) relu_forward_stub(y.device(), y, x);
}

void relu_backward(const Tensor& dx, const Tensor& dy, const Tensor& y) {
  check_elementwise("relu_backward", "dx", dx, "dy", dy, "y", &y);
  if (dx.numel() > 0) relu_backward_stub(dx.device(), dx, dy, y);
}

void gelu_forward(const Tensor& y, const Tensor& x) {
  check_elementwise("gelu_forward", "y", y, "x", x);
  if (y.numel() > 0) gelu_forward_stub(y.device(), y, x);
}

void gelu_backward(const Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_elementwise("gelu_backward", "dx", dx, "dy", dy, "x", &x);
  if (dx.numel() > 0) gelu_backward_stub(dx.device(), dx, dy, x);
}

void dropout_forward(const Tensor& y, const Tensor& x, float p, uint64_t seed, uint64_t offset) {
  check_elementwise("dropout_forward", "y", y, "x", x);
  check_dropout_p("dropout_forward", p);
  if (y.numel() > 0) dropout_forward_stub(y.device(), y, x, p, seed, offset);
}

void dropout_backward(const Tensor& dx, const Tensor& dy, float p, uint64_t seed, uint64_t offset) {
  check_elementwise("dropout_backward", "dx", dx, "dy", dy);
  check_dropout_p("dropout_backward", p);
  if (dx.numel() > 0) dropout_backward_stub(dx.device(), dx, dy, p, seed, offset);
}

}  // namespace stoker::ops
