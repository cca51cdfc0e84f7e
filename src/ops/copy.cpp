#include "stoker/ops/copy.h"

#include "ops/backend.h"
#include "ops/validate.h"

namespace stoker::ops {

void fill(const Tensor& out, double value) {
  detail::check_defined("fill", "out", out);
  detail::check_backend("fill", out);
  if (out.numel() == 0) return;
  STOKER_DISPATCH(out.device(), fill, out, value);
}

void copy(const Tensor& dst, const Tensor& src) {
  detail::check_defined("copy", "dst", dst);
  detail::check_defined("copy", "src", src);
  detail::check_backend("copy", dst);
  detail::check_backend("copy", src);
  detail::check_same_dtype("copy", "dst", dst, "src", src);
  detail::check_same_numel("copy", "dst", dst, "src", src);
  core::detail::copy_bytes(dst, src);
}

void cast(const Tensor& dst, const Tensor& src) {
  detail::check_float("cast", "dst", dst);
  detail::check_float("cast", "src", src);
  detail::check_backend("cast", dst);
  detail::check_same_device("cast", "dst", dst, "src", src);
  detail::check_same_numel("cast", "dst", dst, "src", src);
  if (dst.numel() == 0) return;
  STOKER_DISPATCH(dst.device(), cast, dst, src);
}

}  // namespace stoker::ops
