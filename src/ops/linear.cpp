// Public add_bias and bias_grad: validation, then dispatch. Leading dimensions of y / dy are
// flattened into rows, so [B, T, C] works like [B * T, C]; the bias is an f32 vector of C.
#include "stoker/ops/gemm.h"

#include "ops/linear_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {
void check_bias_pair(const char* op, const char* rows_name, const Tensor& rows,
                     const char* bias_name, const Tensor& bias) {
  detail::check_float(op, rows_name, rows);
  detail::check_defined(op, bias_name, bias);
  detail::check_backend(op, rows);
  detail::check_same_device(op, rows_name, rows, bias_name, bias);
  STOKER_CHECK(rows.rank() >= 1, "ops::", op, ": ", rows_name, " is ", rows.str(),
               "; expected [N, C] (at least one dimension)");
  STOKER_CHECK(bias.dtype() == DType::f32 && bias.rank() == 1 && bias.size(0) == rows.size(-1),
               "ops::", op, ": ", bias_name, " is ", bias.str(), " and ", rows_name, " is ",
               rows.str(), "; expected ", bias_name, " f32[", rows.size(-1),
               "] (one value per column of ", rows_name, ")");
}
}  // namespace

void add_bias(const Tensor& y, const Tensor& bias) {
  check_bias_pair("add_bias", "y", y, "bias", bias);
  if (y.numel() > 0) add_bias_stub(y.device(), y, bias);
}

void bias_grad(const Tensor& dbias, const Tensor& dy) {
  check_bias_pair("bias_grad", "dy", dy, "dbias", dbias);
  if (dy.numel() > 0) bias_grad_stub(dy.device(), dbias, dy);
}

}  // namespace stoker::ops
