// Public FP8 ops: validation, then dispatch (ops/fp8.h).
#include "stoker/ops/fp8.h"

#include "ops/fp8_stubs.h"
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
  fp8_quantize_stub(x.device(), codes, x, scale, format);
}

void fp8_dequantize(const Tensor& y, const Tensor& codes, const Tensor& scale, Fp8Format format) {
  check_codes("fp8_dequantize", codes, y, "y");
  check_scalar("fp8_dequantize", "scale", scale, y);
  if (y.numel() == 0) return;
  fp8_dequantize_stub(y.device(), y, codes, scale, format, false);
}

void fp8_dequantize(const Tensor& y, const Fp8Tensor& x) {
  check_codes("fp8_dequantize", x.codes, y, "y");
  check_scalar("fp8_dequantize", "scale_inv", x.scale_inv, y);
  if (y.numel() == 0) return;
  fp8_dequantize_stub(y.device(), y, x.codes, x.scale_inv, x.format, true);
}

void fp8_cast_transpose(const Fp8CastOutputs& out, const Tensor& x, const Tensor& scale,
                        Fp8Format format) {
  const char* op = "fp8_cast_transpose";
  detail::check_float(op, "x", x);
  detail::check_backend(op, x);
  STOKER_CHECK(x.rank() == 2, "ops::", op, ": x is ", x.str(),
               "; expected a 2-D tensor (reshape to [rows, features] first)");
  check_scalar(op, "scale", scale, x);
  STOKER_CHECK(out.scale_inv != nullptr, "ops::", op,
               ": out.scale_inv is null; it receives 1 / scale, which the codes are read with");
  check_scalar(op, "out.scale_inv", *out.scale_inv, x);
  if (out.amax) check_scalar(op, "out.amax", *out.amax, x);
  const int64_t r = x.size(0), c = x.size(1);
  const auto check_out = [&](const Tensor* t, const char* name, int64_t rows, int64_t cols) {
    if (!t) return;
    detail::check_defined(op, name, *t);
    STOKER_CHECK(t->dtype() == DType::u8 && t->rank() == 2 && t->size(0) == rows &&
                     t->size(1) == cols && t->device() == x.device(),
                 "ops::", op, ": ", name, " is ", t->str(), "; expected u8[", rows, ", ", cols,
                 "] on ", x.device().str(), " for x ", x.str());
  };
  check_out(out.codes, "out.codes", r, c);
  check_out(out.codes_t, "out.codes_t", c, r);
  fp8_cast_transpose_stub(x.device(), out, x, scale, format);
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
  fp8_update_scale_stub(history.device(), scale, history, amax, format, margin);
}

}  // namespace stoker::ops
