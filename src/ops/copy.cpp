#include "stoker/ops/layout.h"

#include <string>

#include "ops/copy_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

void fill(const Tensor& out, double value) {
  detail::check_defined("fill", "out", out);
  detail::check_backend("fill", out);
  if (out.numel() == 0) return;
  fill_stub(out.device(), out, value);
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
  cast_stub(dst.device(), dst, src);
}

void cast_multi(std::span<const Tensor> dsts, std::span<const Tensor> srcs) {
  STOKER_CHECK(dsts.size() == srcs.size(), "ops::cast_multi: ", dsts.size(), " destinations but ",
               srcs.size(), " sources");
  if (dsts.empty()) return;
  const DType half = dsts[0].dtype();
  STOKER_CHECK(half == DType::f16 || half == DType::bf16,
               "ops::cast_multi: destinations must be f16 or bf16, got ", dsts[0].str());
  for (size_t i = 0; i < dsts.size(); ++i) {
    const std::string at = "[" + std::to_string(i) + "]";
    detail::check_defined("cast_multi", ("dsts" + at).c_str(), dsts[i]);
    detail::check_defined("cast_multi", ("srcs" + at).c_str(), srcs[i]);
    STOKER_CHECK(dsts[i].dtype() == half && srcs[i].dtype() == DType::f32 &&
                     dsts[i].numel() == srcs[i].numel() && dsts[i].device() == dsts[0].device() &&
                     srcs[i].device() == dsts[0].device(),
                 "ops::cast_multi: pair ", i, " is dst ", dsts[i].str(), ", src ", srcs[i].str(),
                 "; expected an f32 source into a ", dtype_name(half),
                 " destination of the same size, all on ", dsts[0].device().str());
  }
  detail::check_backend("cast_multi", dsts[0]);
  cast_multi_stub(dsts[0].device(), dsts, srcs);
}

}  // namespace stoker::ops
