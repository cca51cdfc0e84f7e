// Public FP8 ops: validation, then dispatch (ops/fp8.h).
#include "stoker/ops/fp8.h"

#include "ops/backend.h"
#include "ops/fp8_backend.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {
void check_scalar(const char* op, const char* name, const Tensor& t, const Tensor& like) {
  detail::check_defined(op, name, t);
  STOKER_CHECK(t.dtype() == DType::f32 && t.numel() == 1 && t.device() == like.device(),
               "ops::", op, ": ", name, " is ", t.str(), "; expected a rank-0 f32 tensor on ",
               like.device().str());
}

void check_codes(const char* op, const Tensor& codes, const Tensor& values, const char* name) {
  detail::check_defined(op, "codes", codes);
  detail::check_float(op, name, values);
  detail::check_backend(op, values);
  detail::check_same_device(op, name, values, "codes", codes);
  detail::check_same_numel(op, name, values, "codes", codes);
  STOKER_CHECK(codes.dtype() == DType::u8, "ops::", op, ": codes is ", codes.str(),
               "; expected u8 (one FP8 code per element)");
}
}  // namespace

void fp8_quantize(const Tensor& codes, const Tensor& x, const Tensor& scale, Fp8Format format) {
  check_codes("fp8_quantize", codes, x, "x");
  check_scalar("fp8_quantize", "scale", scale, x);
  if (x.numel() == 0) return;
  STOKER_DISPATCH(x.device(), fp8_quantize, codes, x, scale, format);
}

void fp8_dequantize(const Tensor& y, const Tensor& codes, const Tensor& scale, Fp8Format format) {
  check_codes("fp8_dequantize", codes, y, "y");
  check_scalar("fp8_dequantize", "scale", scale, y);
  if (y.numel() == 0) return;
  STOKER_DISPATCH(y.device(), fp8_dequantize, y, codes, scale, format);
}

void fp8_update_scale(const Tensor& scale, const Tensor& history, const Tensor& amax,
                      Fp8Format format, int margin) {
  const char* op = "fp8_update_scale";
  detail::check_defined(op, "history", history);
  detail::check_backend(op, history);
  STOKER_CHECK(history.dtype() == DType::f32 && history.rank() == 1 && history.numel() >= 1,
               "ops::", op, ": history is ", history.str(),
               "; expected f32[L] with L >= 1 (the amax of the last L steps)");
  check_scalar(op, "scale", scale, history);
  check_scalar(op, "amax", amax, history);
  STOKER_CHECK(margin >= 0 && margin < 64, "ops::", op, ": margin ", margin,
               " must be in [0, 64) (the scale is divided by 2^margin)");
  STOKER_DISPATCH(history.device(), fp8_update_scale, scale, history, amax, format, margin);
}

}  // namespace stoker::ops
